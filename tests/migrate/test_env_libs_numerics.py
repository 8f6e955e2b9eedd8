"""Extra cases for NM601–NM603, NM701–NM704 and NM801–NM802 beyond the rules' own examples."""

from __future__ import annotations

from neuron_migrate.migrate.rules.libraries import LIBRARIES, library_of

from .helpers import findings


def codes_lines(source: str, codes: tuple[str, ...]) -> list[tuple[str, int]]:
    return [(f.code, f.line) for f in findings(source, codes)]


def test_env_var_in_log_message_and_docstring_is_not_flagged():
    source = (
        '"""Set CUDA_VISIBLE_DEVICES and NCCL_DEBUG."""\nimport logging, os\n'
        'logging.info("CUDA_VISIBLE_DEVICES=%s", os.environ["CUDA_VISIBLE_DEVICES"])\n'
    )
    assert codes_lines(source, ("NM601", "NM602")) == [("NM601", 3)]
    assert "NEURON_RT_VISIBLE_CORES" in findings(source, ("NM601",))[0].message


def test_env_copy_passed_to_subprocess_through_a_name():
    source = (
        "import os, subprocess\ndef run(cmd):\n    env = dict(os.environ)\n"
        "    env['NCCL_SOCKET_IFNAME'] = 'eth0'\n    extra = {'CUDA_LAUNCH_BLOCKING': '1'}\n"
        "    subprocess.run(cmd, env={**env, **extra})\n    subprocess.run(cmd, env=extra)\n"
    )
    assert codes_lines(source, ("NM601", "NM602")) == [("NM602", 4), ("NM601", 5)]


def test_unrelated_cuda_names_are_not_env_vars():
    source = "import os\nos.environ['MY_CUDA_FLAG'] = '1'\nx = {'NCCL_DEBUG': 1}\n"
    assert codes_lines(source, ("NM601", "NM602")) == []


def test_nvidia_smi_through_command_variable_and_fstring():
    source = (
        "import os, subprocess\ncmd = ['nvidia-smi', '-L']\nsubprocess.check_output(cmd)\n"
        "os.popen(f'nvidia-smi -i {idx}')\nsubprocess.run(['ls'])\nprint('nvidia-smi')\n"
    )
    assert codes_lines(source, ("NM603",)) == [("NM603", 3), ("NM603", 4)]


def test_library_table_prefixes():
    assert library_of("apex.normalization.fused_layer_norm") == "apex.normalization"
    assert library_of("apex.contrib.xentropy") == "apex"
    assert library_of("tensorrt_llm") is None
    assert library_of("cudax") is None
    assert all(LIBRARIES.values())


def test_one_finding_per_statement_and_library():
    source = "import flash_attn, flash_attn.layers\nfrom xformers.ops import memory_efficient_attention\n"
    got = findings(source, ("NM701",))
    assert [(f.line, f.col) for f in got] == [(1, 7), (2, 0)]
    assert all("scaled_dot_product_attention" in f.message for f in got)


def test_a_library_importing_itself_is_not_its_own_dependency():
    """liger-kernel's modules import one another (review 42: 1,209 findings); its Triton import still counts,
    and DeepSpeed's runtime importing `deepspeed.ops` is outside that package."""
    source = "import triton\nfrom liger_kernel.ops.utils import ensure_contiguous\n"
    assert [f.line for f in findings(source, ("NM701",), path="src/liger_kernel/ops/rms_norm.py")] == [1]
    assert [f.line for f in findings(source, ("NM701",), path="train.py")] == [1, 2]
    ops = "from deepspeed.ops.adam import FusedAdam\n"
    assert len(findings(ops, ("NM701",), path="deepspeed/runtime/engine.py")) == 1
    assert not findings(ops, ("NM701",), path="deepspeed/ops/lamb/fused_lamb.py")


def test_optional_import_is_said_in_the_message():
    source = "try:\n    import triton\nexcept ModuleNotFoundError:\n    triton = None\nimport pynvml\n"
    got = findings(source, ("NM701",))
    assert ["optional import" in f.message for f in got] == [True, False]
    assert "neuron-monitor" in got[1].message
    required = (  # ultralytics installs TensorRT when the import fails, then imports it again
        "def export():\n    try:\n        import tensorrt as trt\n    except ImportError:\n"
        "        check_tensorrt()\n        import tensorrt as trt\n"
        "def load():\n    try:\n        import apex\n    except ImportError:\n"
        "        raise RuntimeError('install apex')\n"
    )
    assert not [f for f in findings(required, ("NM701",)) if "optional import" in f.message]


def test_triton_kernel_reported_on_def_line_once():
    source = "import triton\n@triton.autotune(configs=[], key=[])\n@triton.jit\ndef k(x):\n    pass\n"
    assert codes_lines(source, ("NM704",)) == [("NM704", 4)]


def test_cpp_extension_load_with_cpp_only_sources_is_fine():
    source = (
        "from torch.utils.cpp_extension import load\na = load('a', ['a.cpp'])\n"
        "b = load('b', sources=['b.cpp', 'b_kernel.cuh'], verbose=True)\n"
    )
    assert codes_lines(source, ("NM702",)) == [("NM702", 3)]


def test_float64_checks_are_not_flagged_but_values_are():
    source = (
        "import torch\nif t.dtype is torch.double:\n    t = t.to(dtype=torch.float64)\n"
        "ok = isinstance(t, torch.DoubleTensor)\n"
    )
    assert codes_lines(source, ("NM801",)) == [("NM801", 3)]


def test_complex_certain_uses_only():
    source = (
        "import torch\nf = torch.fft.rfftfreq(8)\ns = torch.fft.irfft(z)\nr = torch.view_as_real(z)\n"
        "c = x.cfloat()\nd = x.float()\n"
    )
    assert codes_lines(source, ("NM802",)) == [("NM802", 3), ("NM802", 4), ("NM802", 5)]


def test_a_backend_module_of_a_cuda_only_kernel_library_keeps_its_cuda_calls():
    """hqq's `backends/marlin.py` imports the Marlin CUDA kernels; its `torch.cuda.empty_cache()` runs only
    with them (review 32 rejected the rewrites as CUDA by design). Marlin, BitBLAS, GemLite, DeepEP, NVSHMEM,
    NIXL, FlashInfer and the Mamba kernels are CUDA-only libraries (NM701)."""
    source = "import marlin\nimport torch\n\n\ndef pack(w):\n    torch.cuda.empty_cache()\n    return w\n"
    found = {f.code: f for f in findings(source, path="backends/marlin.py")}
    assert "`marlin` is CUDA-only" in found["NM701"].message
    assert found["NM402"].fix is None and "the module drives `marlin`" in found["NM402"].message
    assert {"bitblas", "gemlite", "deep_ep", "nvshmem", "nixl", "flashinfer", "mamba_ssm"} <= set(LIBRARIES)


def test_a_check_before_a_call_of_a_cuda_only_kernel_extension_stays_cudas():
    """AutoAWQ's ExLlama layers assert a CUDA weight before handing it to `exl_ext.make_q4`, a CUDA C++
    extension imported with `try_import("exl_ext")` (review 43 #1, #2): letting neuron through the assert
    only moves the failure into the kernel. nvFuser and the cuDNN frontend are CUDA-only too."""
    source = (
        "import torch\nfrom awq.utils.module import try_import\n\nexl_ext, msg = try_import('exl_ext')\n\n\n"
        "class Linear:\n    def post_init(self):\n        assert self.qweight.device.type == 'cuda'\n"
        "        self.q4 = exl_ext.make_q4(self.qweight)\n"
    )
    check = next(f for f in findings(source) if f.code == "NM105")
    assert check.fix is None and "exl_ext" in check.message
    assert {"nvfuser", "nvfuser_direct", "cudnn", "exl_ext", "exlv2_ext", "awq_ext"} <= set(LIBRARIES)


def test_a_class_that_extends_a_cuda_only_librarys_class_keeps_its_cuda_code():
    """galore-torch's `AdamW8bit(Optimizer2State)` synchronizes after bitsandbytes' CUDA update step (review
    44): its CUDA calls are the library's, not code to make generic; a plain optimizer's are."""
    source = (
        "import torch\nfrom bitsandbytes.optim.optimizer import Optimizer2State\n\n\n"
        "class AdamW8bit(Optimizer2State):\n    def step(self):\n        torch.cuda.synchronize()\n\n\n"
        "class Plain(torch.optim.Optimizer):\n    def step(self):\n        torch.cuda.synchronize()\n"
    )
    kept, fixed_sync = (f for f in findings(source) if f.code == "NM401")
    assert kept.fix is None and "extends `Optimizer2State` from `bitsandbytes`" in kept.message
    assert fixed_sync.fix is not None


def test_a_library_imported_several_times_in_one_function_is_one_finding():
    """llamafactory's `apply_liger_kernel` imports liger-kernel once per model type: one port, not 20
    findings (review 44). Another function's import, or another library, is its own finding."""
    source = (
        "def apply(kind):\n    if kind == 'llama':\n        from liger_kernel.transformers import a as fn\n"
        "    else:\n        from liger_kernel.transformers import b as fn\n    import apex\n"
        "    return fn\n\n\n"
        "def other():\n    from liger_kernel.transformers import c\n"
    )
    assert [f.line for f in findings(source, ("NM701",))] == [3, 6, 11]
