"""Values other libraries read as CUDA's (Ray's GPU resource, TensorPipe's RPC device maps, the GPU that
renders through EGL) keep their CUDA checks (torchrl's collectors and environments, as they were seen); a
module written against DeepSpeed's accelerator abstraction keeps its device code for it."""

from __future__ import annotations

import pytest

from .helpers import findings, fixed


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nCONFIG = {\n    'num_cpus': 1,\n"
        "    'num_gpus': 0.2 if torch.cuda.is_available() else None,\n}\n",
        "import ray\nimport torch\n\n\n@ray.remote(num_gpus=1 if torch.cuda.is_available() else 0)\n"
        "def work():\n    return 1\n",
        "import ray\nimport torch\nnum_gpus = torch.cuda.device_count()\nray.init(num_gpus=num_gpus)\n",
        "import torch\nfrom ray.train import ScalingConfig\n"
        "config = ScalingConfig(num_workers=2, use_gpu=torch.cuda.is_available())\n",
    ],
)
def test_rays_gpu_resource_stays_cuda_s(source):
    """Ray counts NVIDIA GPUs under `num_gpus`; Trainium is its `neuron_cores` resource, so an accelerator's
    answer would ask a Trainium host for GPUs it does not have and the task would never be scheduled."""
    assert fixed(source) == source
    found = [f for f in findings(source) if "Ray's" in f.message]
    assert found and all(f.fix is None for f in found)
    assert 'resources={"neuron_cores": n}' in found[0].message


@pytest.mark.parametrize(
    "source",
    [
        # a count that is no resource request, and a `num_gpus` keyword without Ray or `num_cpus`
        "import torch\nnum_gpus = torch.cuda.device_count()\nprint(num_gpus)\n",
        "import torch\nreport(num_gpus=torch.cuda.device_count(), seed=0)\n",
    ],
)
def test_a_gpu_count_outside_ray_is_fixed(source):
    assert fixed(source) != source
    assert not [f for f in findings(source) if "Ray's" in f.message]


def test_tensorpipe_device_maps_keep_their_cuda_check():
    """TensorPipe validates device maps against CPU and CUDA devices only (torch's
    `_tensorpipe_validate_devices`): made generic, the check would map neuron devices and `init_rpc` fails
    where CPU-only RPC used to run."""
    source = (
        "import torch\nfrom torch.distributed import rpc\n\n\ndef start(n):\n"
        "    options = rpc.TensorPipeRpcBackendOptions()\n"
        "    if torch.cuda.is_available():\n"
        "        for i in range(n):\n"
        "            options.set_device_map(f'worker{i}', {0: i})\n"
        "    return options\n"
    )
    assert fixed(source) == source
    check = next(f for f in findings(source) if f.code == "NM106")
    assert "set_device_map" in check.message


def test_the_egl_rendering_device_keeps_its_cuda_count():
    """dm_control picks the GPU that renders through EGL from CUDA's device count: Neuron cores are not EGL
    devices."""
    source = (
        "import os\nimport torch\n\nif torch.cuda.device_count() > 1:\n"
        "    n = torch.cuda.device_count() - 1\n"
        "    os.environ['EGL_DEVICE_ID'] = str(1 + (os.getpid() % n))\n"
    )
    assert fixed(source) == source


def test_a_module_with_deepspeeds_accelerator_abstraction_is_left_to_it():
    """DeepSpeed's zenflow and nvme modules import `get_accelerator` and name devices with it: a maintainer
    wants `get_accelerator().device_name(i)` there, not the `torch.accelerator` idiom beside it."""
    source = (
        "import torch\nfrom deepspeed.accelerator import get_accelerator\n\n\ndef f(x, i):\n"
        "    return x.to(f'cuda:{i}')\n"
    )
    assert fixed(source) == source
    [finding] = findings(source)
    assert "DeepSpeed's accelerator abstraction (`get_accelerator()`)" in finding.message


@pytest.mark.parametrize(
    "source",
    [
        # espnet's k2 decoding script (k2 at the module's top) and transducer loss (imported in its function)
        "import k2\nimport torch\n\n\ndef decode(ngpu):\n    device = 'cuda' if ngpu > 0 else 'cpu'\n"
        "    return k2.Fsa.from_str('').to(device)\n",
        "import torch\n\n\ndef loss(x):\n    try:\n        import k2\n    except ImportError:\n"
        "        raise\n    with torch.cuda.amp.autocast(enabled=False):\n        return k2.rnnt_loss(x)\n",
    ],
)
def test_code_that_works_with_a_cpu_and_cuda_only_library_gets_an_unsafe_fix(source):
    """k2, warp-transducer and PyTorch Geometric's sparse kernels exist for the CPU and CUDA only: made
    generic, the device would be neuron on Trainium, where the CPU used to run them."""
    assert fixed(source) == source
    generic = [f for f in findings(source) if f.fix is not None]
    assert generic and all(f.fix.safety == "unsafe" for f in generic)
    assert all("whose kernels run on the CPU and CUDA only" in f.message for f in generic)


@pytest.mark.parametrize(
    ("source", "library"),
    [
        # mmrotate's DOTA merge: mmcv's rotated NMS has CPU and CUDA kernels (and vendors'), none for neuron
        (
            "import torch\nfrom mmcv.ops import nms_rotated\n\n\ndef merge(dets):\n"
            "    if torch.cuda.is_available():\n        dets = dets.cuda()\n"
            "    return nms_rotated(dets, 0.1)\n",
            "mmcv.ops",
        ),
        # whisperx: faster-whisper's (CTranslate2's) `device=` takes "cpu" or "cuda"
        (
            "import torch\nfrom faster_whisper import WhisperModel\n\n\ndef load(name):\n"
            "    device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
            "    return WhisperModel(name, device=device)\n",
            "faster_whisper",
        ),
    ],
)
def test_a_device_choice_beside_a_cpu_and_cuda_only_library_is_left_for_a_person(source, library):
    assert fixed(source) == source
    assert any(
        f"works with `{library}`, whose kernels run on the CPU and CUDA only" in f.message
        for f in findings(source)
    )
    # only mmcv's kernels count, not its other modules
    assert ".to(" in fixed("import mmcv\nimport torch\nx = torch.ones(2).cuda()\n")


def test_a_function_beside_one_that_imports_k2_keeps_its_safe_fix():
    source = (
        "import torch\n\n\ndef loss(x):\n    import k2\n    return k2.rnnt_loss(x.cuda())\n\n\n"
        "def other(x):\n    return x.cuda()\n"
    )
    safety = {f.line: f.fix.safety for f in findings(source) if f.code == "NM103"}
    assert safety == {6: "unsafe", 10: "safe"}


def test_a_function_that_does_not_use_the_library_its_module_imports_keeps_its_safe_fix():
    """mmdet's samplers: the NMS sampler calls `mmcv.ops`, the random sampler of the same module does not."""
    source = (
        "import torch\nfrom mmcv.ops import nms_match\n\n\ndef nms(dets):\n"
        "    return nms_match(dets.cuda(), 0.5)\n\n\ndef sample(gallery):\n"
        "    return torch.tensor(gallery, device=torch.cuda.current_device())\n"
    )
    safety = {f.line: f.fix.safety for f in findings(source) if f.fix is not None}
    assert safety == {6: "unsafe", 10: "safe"}, safety
    # espnet's k2 `inference()` hands its device to the module's own class, which calls k2
    source = (
        "import k2\nimport torch\n\n\nclass Speech2Text:\n    def __init__(self, device):\n"
        "        self.graph = k2.Fsa.from_str('').to(device)\n\n\ndef inference(ngpu):\n"
        "    device = 'cuda' if ngpu > 0 else 'cpu'\n    return Speech2Text(device)\n"
    )
    assert [f.fix.safety for f in findings(source) if f.fix is not None] == ["unsafe"]


def test_a_project_that_uses_deepspeeds_accelerator_keeps_every_module_for_it(tmp_path, run_cli):
    """DeepSpeed's `nvme/torch_io.py` does not import `get_accelerator`, but its siblings name devices with
    it: the project's device code goes through that abstraction, and the scan cache keys on the fact."""
    (tmp_path / "io.py").write_text("def buffer(torch, i):\n    return torch.ones(2, device=f'cuda:{i}')\n")
    (tmp_path / "aio.py").write_text("import torch\n\n\ndef move(x, i):\n    return x.to(f'cuda:{i}')\n")
    done = run_cli("fix", ".", cwd=tmp_path)
    assert "+    return x.to(" in done.stdout  # no DeepSpeed yet: fixed
    (tmp_path / "handle.py").write_text("from deepspeed.accelerator import get_accelerator\n")
    done = run_cli("fix", ".", cwd=tmp_path)
    assert "+    return x.to(" not in done.stdout, done.stdout
    assert "DeepSpeed's accelerator abstraction" in run_cli("scan", ".", cwd=tmp_path).stderr
    # one integration module among many files with CUDA code (transformers) is no project abstraction
    for n in range(4):
        (tmp_path / f"model_{n}.py").write_text("import torch\nx = torch.ones(1).cuda()\n")
    done = run_cli("fix", ".", cwd=tmp_path)
    assert "+    return x.to(" in done.stdout, done.stdout
