"""Files that are CUDA's as a whole (used by `cuda_context`): by their name or package, or because they are
the integration of a CUDA-only library.

- `torch/cuda/memory.py`, `cuda_utils.py`, `torch/backends/cudnn/rnn.py`, `nccl_utils.py`, `triton_impl.py`,
  `codegen/rocm/...`: a folder named after CUDA or one of its libraries (cuDNN, NCCL, cuBLAS, CUTLASS), ROCm
  or Triton, or a file name that mentions one; a folder for TensorRT or NVIDIA's Isaac simulators
  (`runtime/triton_trtllm/benchmark.py`). A project folder's name (`cuda_project/train.py`) says nothing
  about one file.
- `accelerate/utils/megatron_lm.py`: a module that imports a CUDA-only library at its top level (also under
  `if is_megatron_lm_available():` or in a `try`) and is named after it drives that library: none of its code
  runs where the library cannot.
- speechbrain's `integrations/numba/transducer_loss.py`: a module that defines kernels with a CUDA-only
  library it imports at its top (`from numba import cuda` and `@cuda.jit` functions; `@triton.jit`): its
  code launches and serves them.
- `transformers/integrations/deepgemm.py`: a module whose docstring says it requires CUDA ("Requirements:
  CUDA, Hopper (SM90+)", "CUDA-only").
- `torch/distributed/_symmetric_memory/__init__.py`: a module that registers its operators' kernels for CUDA
  only (`@torch.library.impl(lib, "fused_all_gather_matmul", "CUDA")`, beside "Meta" shape functions), or
  for the CPU and CUDA only (spikingjelly's `_ops/dispatch.py`, whose fake kernels describe the CUDA
  kernels' layout): its code serves those kernels, and the operators must be ported before any of it runs
  on another accelerator. A module that also registers a kernel for another device or a composite key
  (FSDP's `copy_` for CUDA, XPU, HPU and CPU) is generic.
- ColBERT's `indexing/codecs/residual.py`: a module that builds its own CUDA kernels with
  `torch.utils.cpp_extension` (`load(sources=[..., "decompress_residuals.cu"])`): its code moves tensors to
  CUDA for them, and the kernels must be ported before any of it runs elsewhere.
"""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.migrate.call_sites import calls_in, top_level_names
from neuron_migrate.migrate.cuda_libraries import library_of
from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.kernel_modules import module_name
from neuron_migrate.migrate.names import dotted, import_bindings
from neuron_migrate.migrate.patterns import keyword, positional
from neuron_migrate.migrate.rules.libraries import imported_library
from neuron_migrate.migrate.sources import KERNEL_SUFFIXES
from neuron_migrate.migrate.walk import find

_CUDA_FOLDERS = frozenset({"cuda", "cudnn", "nccl", "cublas", "cutlass", "rocm", "hip", "triton"})
#: a folder for NVIDIA's inference or simulation stacks: TensorRT (f5-tts's `runtime/triton_trtllm`), Isaac
_NVIDIA_STACK_FOLDER = re.compile(r"tensorrt|trtllm|(^|_)trt(_|$)|isaac_?(?:gym|sim|lab)")
#: CUDA and its libraries, NVIDIA's (`nv_universal_gemm`, `nvmath`) and its embedded CUDA platforms (Jetson,
#: Tegra), ROCm (AMD's GPUs, driven through the same `torch.cuda` API), Triton (GPU kernels: Trainium's are
#: NKI), TensorRT (`trt_utils`, `triton_trtllm`) and NVIDIA's Isaac simulators (Isaac Gym, Isaac Sim, Isaac
#: Lab: GPU PhysX, whose device is a CUDA one)
_CUDA_STEM = re.compile(
    r"cuda|cudnn|nccl|cublas|cutlass|nvidia|nvtx|nvmath|jetson|(?<![a-z])tegra|rocm|triton|(^|_)nv(_|$)"
    r"|tensorrt|trtllm|(^|_)trt(_|$)|isaac_?(?:gym|sim|lab)"
)


def cuda_named(name: str) -> bool:
    """Whether a file, function or class name says it is about CUDA or one of its libraries
    (`_nccl_algo_time`, `triton_impl`, `CudaDdpComparisonTest`)."""
    return _CUDA_STEM.search(name.lower()) is not None


def cuda_file(path: str) -> bool:
    """Whether a file is CUDA's by its name or package (see the module docstring)."""
    parts = path.replace("\\", "/").split("/")
    stem = parts[-1].lower().removesuffix(".py").removesuffix(".ipynb")
    if cuda_named(stem):
        return True
    folders = [part.lower() for part in parts[:-1]]
    return any(part in _CUDA_FOLDERS or _NVIDIA_STACK_FOLDER.search(part) for part in folders)


#: a docstring's statement that its module needs CUDA
_REQUIRES_CUDA = re.compile(
    r"\brequire(?:s|d|ments?)?\b:?\s+(?:an?\s+)?(?:NVIDIA\s+)?CUDA\b|\bCUDA[- ]only\b", re.I
)


def requires_cuda(module: cst.Module) -> bool:
    """Whether the module's docstring says it requires CUDA (see the module docstring)."""
    docstring = module.get_docstring(clean=False)
    return docstring is not None and _REQUIRES_CUDA.search(docstring) is not None


def library_module(module: cst.Module, path: str) -> str | None:
    """The CUDA-only library a module is the integration of (it imports it at its top level and its file is
    named after it, or it is in a folder named after it: diffusers' `quantizers/bitsandbytes/`), if any."""
    *folders, stem = path.replace("\\", "/").lower().split("/")
    for folder in folders:
        if library_of(folder) == folder:
            return folder
    for statements in _top_level_blocks(module):
        library = imported_library(statements)
        if library is not None and library.split(".")[0].lower() in stem:
            return library
    return None


def _top_level_blocks(module: cst.Module) -> list[list[cst.CSTNode]]:
    """The module's statements, and those of the `if`/`try` blocks at its top level (one level deep)."""
    blocks: list[list[cst.CSTNode]] = [list(module.body)]
    for statement in module.body:
        if isinstance(statement, (cst.If, cst.Try)) and isinstance(statement.body, cst.IndentedBlock):
            blocks.append(list(statement.body.body))
    return blocks


#: extension libraries (or their kernel packages) whose kernels are built for the CPU and CUDA only: a tensor
#: or device name moved to another device fails in them (k2's FSAs and RNN-T losses, warp-transducer, PyTorch
#: Geometric's sparse and scatter kernels, OpenMMLab's `mmcv.ops` (CPU, CUDA and vendors' NPU/MLU kernels: no
#: neuron), CTranslate2 and faster-whisper, whose `device=` takes "cpu" or "cuda", and CuLE's Atari emulator
#: (`torchcule`: CUDA or the CPU))
CPU_AND_CUDA_LIBRARIES = frozenset(
    {
        "k2",
        "warprnnt_pytorch",
        "warp_rnnt",
        "torch_sparse",
        "torch_scatter",
        "torch_cluster",
        "torch_spline_conv",
        "pyg_lib",
        "mmcv.ops",
        "ctranslate2",
        "faster_whisper",
        "torchcule",
    }
)


def cpu_and_cuda_library(ctx, stack: tuple[cst.CSTNode, ...]) -> str | None:
    """The CPU-and-CUDA-only library (`CPU_AND_CUDA_LIBRARIES`) the code at the end of `stack` works with:
    one a function around the code imports in its body, or one the module imports at its top that the
    code's (outermost) function uses, itself or through the module's own functions and classes that do
    (espnet's k2 `inference()` builds the module's `Speech2Text`), or any such import for module-level code.
    mmdet's random sampler keeps its fix beside the NMS sampler of the same module that calls `mmcv.ops`."""
    functions = [node for node in stack if isinstance(node, cst.FunctionDef)]
    for function in functions:
        for statement in find(function.body, (cst.Import, cst.ImportFrom)):
            for _, qualified in import_bindings(statement):
                if (library := _cpu_and_cuda(qualified)) is not None:
                    return library
    bound = {
        local: library
        for local, qualified in ctx.scopes.module_table.items()
        if (library := _cpu_and_cuda(qualified)) is not None
    }
    if not bound:
        return None
    if not functions:
        return next(iter(bound.values()))
    names = sorted({name.value for name in find(functions[0], cst.Name)})
    if (direct := next((bound[name] for name in names if name in bound), None)) is not None:
        return direct
    users = ctx.once(_library_users, lambda: _library_users(ctx, bound))
    return next((users[name] for name in names if name in users), None)


def _library_users(ctx, bound: dict[str, str]) -> dict[str, str]:
    """The module's top-level functions and classes that use a library of `bound` (a local name -> the
    library), directly or through one another, with the library they reach."""
    uses = {
        statement.name.value: sorted(names)
        for statement, names in top_level_names(ctx)
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef))
    }
    users: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for name, used in uses.items():
            reached = next((bound.get(n) or users[n] for n in used if n in bound or n in users), None)
            if name not in users and reached is not None:
                users[name] = reached
                changed = True
    return users


def project_kernel(
    ctx, stack: tuple[cst.CSTNode, ...], kernel_modules: tuple[tuple[str, str], ...]
) -> tuple[str, str, str] | None:
    """(the name it uses, the module, its library) when the code at the end of `stack` is in a function that
    uses a name the module's top-level imports bind to one of the project's own kernel modules
    (`kernel_modules.py`: `from ...kernels.fp8_dynamic_tensorwise import hp_to_fp8_row_major`), itself or
    through the module's own functions and classes that do; None for module-level code."""
    functions = [node for node in stack if isinstance(node, cst.FunctionDef)]
    if not kernel_modules or not functions:
        return None
    bound = ctx.once((project_kernel, kernel_modules), lambda: _kernel_bindings(ctx, dict(kernel_modules)))
    if not bound:
        return None
    names = sorted({name.value for name in find(functions[0], cst.Name)})
    local = next((name for name in names if name in bound), None)
    if local is None:
        users = ctx.once((_library_users, project_kernel), lambda: _library_users(ctx, {n: n for n in bound}))
        local = next((users[name] for name in names if name in users), None)
    return None if local is None else (local, *bound[local])


def _kernel_bindings(ctx, modules: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Local name -> (kernel module, library) for each name the module's top-level imports bind to one of
    `modules` (dotted names from the scan's root -> library), or to a name defined in one; a relative import
    is resolved against the file's package."""
    own = module_name(ctx.path)
    package = own if ctx.path.replace("\\", "/").endswith("__init__.py") else own.rpartition(".")[0]
    bound: dict[str, tuple[str, str]] = {}
    for statement in ctx.module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.ImportFrom) and small.relative:
                pairs = _relative_bindings(small, package)
            elif isinstance(small, (cst.Import, cst.ImportFrom)):
                pairs = import_bindings(small)
            else:
                continue
            for local, qualified in pairs:
                kernel = _kernel_module(qualified, modules) or _kernel_module(
                    qualified.rpartition(".")[0], modules
                )
                if kernel is not None:
                    bound[local] = kernel
    return bound


def _relative_bindings(statement: cst.ImportFrom, package: str) -> list[tuple[str, str]]:
    """What a relative `from . import x as y` binds, as `names.import_bindings` reads absolute imports."""
    if isinstance(statement.names, cst.ImportStar):
        return []
    base = _absolute(statement, package)
    return [
        ((alias.asname.name if alias.asname else alias.name).value, f"{base}.{alias.name.value}".lstrip("."))
        for alias in statement.names
        if isinstance(alias.name, cst.Name)
        and (alias.asname is None or isinstance(alias.asname.name, cst.Name))
    ]


def _absolute(statement: cst.ImportFrom, package: str) -> str:
    """The module `from M import ...` names, a relative one resolved against the importing `package`."""
    written = dotted(statement.module) if statement.module is not None else ""
    if not statement.relative:
        return written or ""
    parts = package.split(".") if package else []
    parts = parts[: len(parts) - (len(statement.relative) - 1)] if len(statement.relative) > 1 else parts
    return ".".join([*parts, *([written] if written else [])])


def _kernel_module(name: str, modules: dict[str, str]) -> tuple[str, str] | None:
    """The kernel module of `modules` that the dotted `name` is: the same, or one ending in the other (the
    scan's root above or below the package root), by two components at least."""
    if not name:
        return None
    if name in modules:
        return name, modules[name]
    if name.count(".") < 1:
        return None
    for module, library in modules.items():
        if module.count(".") >= 1 and (module.endswith("." + name) or name.endswith("." + module)):
            return module, library
    return None


def _cpu_and_cuda(qualified: str) -> str | None:
    """The entry of `CPU_AND_CUDA_LIBRARIES` that `qualified` (an imported name) is, or is inside."""
    parts = qualified.split(".")
    return next(
        (name for i in range(1, len(parts) + 1) if (name := ".".join(parts[:i])) in CPU_AND_CUDA_LIBRARIES),
        None,
    )


#: the dispatch key (last argument) of a kernel registration: `torch.library.impl(lib, "op", "CUDA")`,
#: `lib.impl("op", fn, "CUDA")`
_REGISTERED_KEY = re.compile(r"""\bimpl\((?:[^()]|\([^()]*\))*?,\s*["'](\w+)["']\s*\)""")
#: keys that serve every device (shapes, autograd formulas), which a CUDA-only registry may add
_ANY_DEVICE_KEYS = frozenset({"Meta", "Autograd"})


def cuda_kernel_registry(source: str) -> str | None:
    """The devices a module registers kernels for ("CUDA", or "the CPU and CUDA"), when it registers them
    for CUDA and at most the CPU (see the module docstring), else None."""
    if "impl(" not in source:
        return None
    keys = set(_REGISTERED_KEY.findall(source))
    cuda = {key for key in keys if "CUDA" in key}
    cpu = {key for key in keys if "CPU" in key}  # `CPU`, `AutogradCPU`
    if not cuda or not keys <= cuda | cpu | _ANY_DEVICE_KEYS:
        return None
    return "the CPU and CUDA" if cpu else "CUDA"


CPP_EXTENSION = "torch.utils.cpp_extension"


def cuda_extension(ctx) -> str | None:
    """What the module builds its own CUDA kernels from with `torch.utils.cpp_extension` (see the module
    docstring): the CUDA source a `CUDAExtension` / `load` / `load_inline` call names, else the call's
    callee; None when it builds none."""
    if "cpp_extension" not in ctx.source:  # however the module reaches it, it spells it: no walk
        return None
    sites = calls_in(ctx).sites
    for function in ("CUDAExtension", "load", "load_inline"):
        for site in sites.get(function, ()):
            call = site.stack[-1]
            if ctx.call_name(call) != f"{CPP_EXTENSION}.{function}":
                continue
            if function == "CUDAExtension" or builds_cuda(call, function):
                source = next((text for text in _string_texts(call) if text.endswith(KERNEL_SUFFIXES)), None)
                return source or ctx.code(call.func).strip()
    return None


def builds_cuda(call: cst.Call, function: str) -> bool:
    """Whether a `torch.utils.cpp_extension` `load` / `load_inline` call (`function`) builds CUDA code
    (NM702's test): `.cu` sources, `cuda_sources=`, `with_cuda=True` or `extra_cuda_cflags=`."""
    with_cuda = keyword(call, "with_cuda")
    if with_cuda is not None and not _is_literal(with_cuda.value, ("False", "None")):
        return True
    if keyword(call, "extra_cuda_cflags") is not None:
        return True
    if function == "load_inline":
        sources = keyword(call, "cuda_sources") or positional(call, 2)
        return sources is not None and not _is_literal(sources.value, ("None",))
    sources = keyword(call, "sources") or positional(call, 1)
    return sources is not None and any(text.endswith(KERNEL_SUFFIXES) for text in _string_texts(sources))


def _is_literal(node: cst.CSTNode, names: tuple[str, ...]) -> bool:
    return isinstance(node, cst.Name) and node.value in names


def _string_texts(node: cst.CSTNode):
    """String literals (and the text ends of f-strings) anywhere inside `node`."""
    if isinstance(node, cst.SimpleString) and (value := string_value(node)) is not None:
        yield value
    elif (
        isinstance(node, cst.FormattedString)
        and node.parts
        and isinstance(node.parts[-1], cst.FormattedStringText)
    ):
        yield node.parts[-1].value
    else:
        for child in node.children:
            yield from _string_texts(child)
