"""NM305: `nn.DataParallel` fails on Trainium (its scatter is CUDA's), so the code that serves it stays CUDA's
until it is replaced: tianshou's `DataParallelNet` (review 30 rejected its generic `.to(device)` as CUDA by
design) and the usual `if torch.cuda.device_count() > 1:` around it."""

from __future__ import annotations

from neuron_migrate.migrate.cautions import MEMORY_ON_MPS_FROM

from .helpers import findings, fixed

_WRAPPER = (
    "import torch\nfrom torch import nn\n\n\nclass DataParallelNet(nn.Module):\n"
    "    def __init__(self, net):\n        super().__init__()\n        self.net = nn.DataParallel(net)\n\n"
    "    def forward(self, obs):\n        obs = obs.cuda()\n        return self.net(obs)\n"
)


def test_a_wrapper_of_data_parallel_keeps_its_cuda_moves():
    found = {f.code: f for f in findings(_WRAPPER)}
    assert found["NM305"].severity == "error" and "torch._C._scatter" in found["NM305"].message
    assert (
        found["NM103"].tied
        and "it reads `self.net`, which its class sets in `__init__`" in found["NM103"].message
    )
    assert fixed(_WRAPPER) == _WRAPPER
    plain = _WRAPPER.replace("nn.DataParallel(net)", "net")
    assert "obs.cuda()" not in fixed(plain)


def test_a_device_count_check_around_data_parallel_stays_cudas():
    """Made generic, the check would wrap the model on a Trainium host with several NeuronCores."""
    source = "import torch\nif torch.cuda.device_count() > 1:\n    model = torch.nn.DataParallel(model)\n"
    (check,) = [f for f in findings(source) if f.code == "NM106"]
    assert (
        check.fix is None and "guards CUDA-only code such as `torch.nn.DataParallel(model)`" in check.message
    )
    assert fixed(source) == source


def test_the_rest_of_a_function_that_wraps_in_data_parallel_is_rewritten():
    """fairseq's vq-wav2vec featurizer moves the model, then wraps it (espnet2's scripts: when `ngpu > 1`):
    the move is right with DDP too, so it does not wait for the wrapper (reviews 17 and 21 merged it)."""
    source = (
        "import torch\nfrom torch import nn\n\n\ndef load(model, ngpu):\n    model.cuda()\n"
        "    if ngpu > 1:\n        model = nn.DataParallel(model)\n    return model\n"
    )
    assert "model.cuda()" not in fixed(source)
    assert any(f.code == "NM305" for f in findings(source))


def test_a_model_attribute_rewrapped_in_data_parallel_is_still_the_model():
    """super-gradients wraps `self.net = nn.DataParallel(self.net)` in one mode: `self.net` is still the model
    every method reads, so a method's own fix does not wait for the wrapper (review 27 merged its
    `empty_cache`). A class that makes the wrapper from what it is given (tianshou's) keeps its moves."""
    source = (
        "import torch\nfrom torch import nn\n\n\nclass Trainer:\n"
        "    def wrap(self):\n        self.net = nn.DataParallel(self.net)\n\n"
        "    def qat(self):\n        torch.cuda.empty_cache()\n        return self.net\n"
    )
    assert "torch.cuda.empty_cache()" not in fixed(source, target_torch=MEMORY_ON_MPS_FROM)
    given = source.replace("nn.DataParallel(self.net)", "nn.DataParallel(net)").replace(
        "def wrap(self)", "def wrap(self, net)"
    )
    assert "torch.cuda.empty_cache()" in fixed(given, target_torch=MEMORY_ON_MPS_FROM)
