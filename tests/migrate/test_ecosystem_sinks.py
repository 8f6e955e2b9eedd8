"""Values other libraries read as CUDA's: Ray's GPU resource, TensorPipe's RPC device maps and the GPU that
renders through EGL keep their CUDA checks (torchrl's collectors and environments, as they were seen)."""

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
