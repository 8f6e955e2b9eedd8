"""Code that stays CUDA's: checks around CUDA-only code keep it, and code that only runs on CUDA is left alone
(the patterns that broke working code in the field, each as it was seen)."""

from __future__ import annotations

import pytest

from .helpers import findings, fixed

ALL = None  # every rule, as `fix` runs them


@pytest.mark.parametrize(
    ("source", "stays"),
    [
        # capability queries under (or next to) the check
        (
            "import torch\nif torch.cuda.is_available() and torch.cuda.is_bf16_supported():\n"
            "    dtype = torch.bfloat16\n",
            "torch.cuda.is_available() and torch.cuda.is_bf16_supported()",
        ),
        (
            "import torch\nif torch.cuda.is_available():\n"
            "    mem = torch.cuda.get_device_properties(0).total_memory\n"
            "    torch.cuda.synchronize()\n",
            "    torch.cuda.synchronize()\n",
        ),
        (
            "import torch\nok = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)\n",
            "ok = torch.cuda.is_available()",
        ),
        # CUDA-only libraries and kernels named in the guarded code, and messages that say it needs CUDA
        (
            "import torch\ndef load():\n    if not torch.cuda.is_available():\n"
            "        raise RuntimeError('needs CUDA')\n"
            "    major, minor = torch.cuda.get_device_capability()\n",
            "if not torch.cuda.is_available():",
        ),
        (
            "import torch\nif torch.cuda.is_available():\n"
            "    from executorch.backends.cuda import CudaBackend\n",
            "if torch.cuda.is_available():",
        ),
        (
            "import torch\ndef f(q):\n    if q.is_cuda and flash_attn_available:\n        return flash(q)\n",
            "q.is_cuda",
        ),
        # a flag that is about CUDA-only kernels
        (
            "import torch\nuse_cuda = torch.cuda.is_available()\nif use_cuda:\n"
            "    name = torch.cuda.get_device_name()\n",
            "use_cuda = torch.cuda.is_available()",
        ),
    ],
)
def test_a_check_around_cuda_only_code_stays_cuda(source, stays):
    after = fixed(source, ALL)
    assert stays in after, after
    notes = [f.message for f in findings(source) if f.code in ("NM104", "NM105", "NM106")]
    assert notes and all("CUDA-only" in m or "only runs on CUDA" in m for m in notes), notes


@pytest.mark.parametrize(
    "source",
    [
        # a function about CUDA by its name (an override of nn.Module.cuda, a helper that asks about CUDA)
        "import torch\nclass M(torch.nn.Module):\n    def cuda(self, *args, **kwargs):\n"
        "        return super().cuda(*args, **kwargs)\n",
        "import torch\ndef is_torch_cuda_available():\n    return torch.cuda.is_available()\n",
        # behind a test about CUDA that no rule rewrites
        "import torch\nif len(torch.cuda.default_generators) > 0:\n    i = torch.cuda.current_device()\n",
        "import torch\nif is_torch_cuda_available():\n    device = torch.device('cuda:0')\n",
        # an argument of CUDA-only code that stays
        "import torch\nmajor = torch.cuda.get_device_properties(torch.cuda.current_device()).major\n",
        # a per-device dispatch table: CUDA's entry stays CUDA's
        "import torch\nSYNC = {'cuda': torch.cuda.synchronize, 'xpu': torch.xpu.synchronize}\n",
        # one branch of a per-device chain: a generic test would take the other devices' branches
        "import torch\nif torch.cuda.is_available():\n    torch.cuda.empty_cache()\n"
        "elif is_torch_npu_available():\n"
        "    torch.npu.empty_cache()\n",
        "import torch\ndef ctx(device):\n    if device.type == 'cuda':\n        return 1\n"
        "    elif device.type == 'mlu':\n"
        "        return 2\n",
        "import torch\ndef bf16(device):\n    if device == 'cuda':\n"
        "        return is_torch_bf16_gpu_available()\n"
        "    if device == 'hpu':\n        return True\n",
        # `.cuda(*args)`: the device may be among the arguments
        "import torch\ndef move(m, *args):\n    return m.cuda(*args)\n",
    ],
)
def test_code_that_only_runs_on_cuda_is_left_alone(source):
    assert fixed(source, ALL) == source


def test_a_precondition_is_judged_by_the_code_it_protects_not_by_its_message():
    """`if not torch.cuda.is_available(): raise SystemExit("needs a CUDA GPU")` guards what follows; when that
    is device-agnostic after the fix, the precondition becomes one for any accelerator."""
    source = (
        "import torch\ndef main():\n    if not torch.cuda.is_available():\n"
        "        raise SystemExit('bench.py needs a CUDA GPU')\n    x = torch.ones(2).cuda()\n"
    )
    after = fixed(source)
    assert (
        "if not torch.accelerator.is_available():" in after
        and "raise SystemExit('bench.py needs a CUDA GPU')" in after
    )


def test_cuda_device_context_takes_the_device_index():
    after = fixed(
        "import torch\ndef f(q):\n    with torch.cuda.device(q.device):\n        pass\n", ("NM106",)
    )
    assert "with torch.accelerator.device_index(q.device.index):" in after
    # an index needs an accelerator (`device_index(0)` raises on a CPU-only machine); None is the no-op
    assert "device_index(rank if torch.accelerator.is_available() else None)" in fixed(
        "import torch\nwith torch.cuda.device(rank):\n    pass\n", ("NM106",)
    )
    # an expression of unknown kind (int or device?) is left for a person
    source = "import torch\nwith torch.cuda.device(where):\n    pass\n"
    assert fixed(source, ("NM106",)) == source


def test_equality_with_a_bare_cuda_string_keeps_meaning_for_indexed_devices():
    after = fixed("import torch\ndef f(device):\n    if device == 'cuda':\n        pass\n", ("NM105",))
    assert 'torch.device(device).type != "cpu" and torch.device(device).index is None' in after
