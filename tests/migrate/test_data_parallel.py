"""NM305: `nn.DataParallel` fails on Trainium (its scatter is CUDA's), so the code that serves it stays CUDA's
until it is replaced: tianshou's `DataParallelNet` (review 30 rejected its generic `.to(device)` as CUDA by
design) and the usual `if torch.cuda.device_count() > 1:` around it."""

from __future__ import annotations

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
