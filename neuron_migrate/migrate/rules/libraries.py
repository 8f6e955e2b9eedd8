"""NM701: imports of libraries that only run on NVIDIA GPUs, each with what replaces it on Trainium."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.conditions import any_string, spelled
from neuron_migrate.migrate.cuda_libraries import LIBRARIES, library_of
from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.guards import exits
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.names import dotted, dynamic_importer, is_dynamic_import
from neuron_migrate.migrate.patterns import positional
from neuron_migrate.migrate.rule import Invalid, Rule
from neuron_migrate.migrate.walk import innermost_function

_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}

#: what an import of each library spells
_LIBRARY_IMPORTS = spelled(LIBRARIES)


class CudaOnlyLibrary(Rule):
    """An import of a library that only runs on NVIDIA GPUs.

    What it does
    Flags `import X` / `from X import ...` (also function-local and optional imports,
    `importlib.import_module("X")` and MONAI's `optional_import("X")`) of flash-attn, xformers, apex,
    bitsandbytes, Triton, CuPy, PyCUDA, pynvml,
    Transformer Engine, `deepspeed.ops`, Megatron-LM, DALI, TensorRT, cuda-python, DeepGEMM, SageMaker's
    distributed libraries (`smdistributed`), nvFuser, the cuDNN frontend, AutoAWQ's and ExLlama's kernel
    extensions and similar. One finding per import statement and library (per function and library for
    imports in a function); the message names the replacement. A library's own modules importing one another
    (liger-kernel's, in `liger_kernel/`) are not reported: the library is not their dependency.

    Why it matters on Trainium
    These packages ship CUDA kernels or talk to the NVIDIA driver: they do not install or do not work on a
    Trainium instance. An optional import (`try: import flash_attn except ImportError:`) keeps the program
    running, but then its fallback path is what runs on Trainium (a handler that raises, or installs the
    library and imports it again, is no fallback).

    Example
    from flash_attn import flash_attn_func
    out = flash_attn_func(q, k, v, causal=True)

    Use instead
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    Fix safety
    No automatic fix: the replacement has a different API (argument order, layouts, features).
    """

    code = "NM701"
    name = "cuda-only-library"
    message = "`{module}` is CUDA-only{optional}: use {replacement}"
    severity = "error"
    effort = "cuda-library"
    cuda_library = True
    triggers = tuple(sorted({key.split(".")[0].encode() for key in LIBRARIES}))
    OPTIONAL: ClassVar[str] = " (optional import: on Trainium its fallback runs, check it)"
    VALID = (
        "import torch.nn.functional as F\nout = F.scaled_dot_product_attention(q, k, v)\n",
        "import deepspeed\nfrom numba import jit\nimport torch.cuda\n",
        "from .cuda import kernels\nfrom . import triton_utils\nimport tritonclient\n",
        "# import flash_attn for speed\nprint('install apex for fused kernels')\n",
    )
    INVALID = (
        Invalid(
            "from flash_attn import flash_attn_func\n",
        ),
        Invalid(
            "import apex, xformers.ops as xops\nfrom apex.normalization import FusedLayerNorm\n",
            count=3,
        ),
        Invalid(
            "try:\n    import bitsandbytes as bnb\nexcept ImportError:\n    bnb = None\n",
        ),
        Invalid(
            "def fused():\n    from deepspeed.ops.adam import FusedAdam\n    from numba import cuda\n",
            count=2,
        ),
        Invalid(
            "import importlib\ntriton = importlib.import_module('triton')\nfrom nvidia import dali\n"
            'cp, has_cp = optional_import("cupy")\n',
            count=3,
        ),
        Invalid(
            "from apex import amp, optimizers\n",
        ),
    )

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._per_function: set[tuple[int, str]] = set()  # (function, library) already reported

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """An import of a library, or a dynamic import (`importlib.import_module`, `optional_import`,
        `__import__`) and its name as a string."""
        # an import of a library is an import statement naming every component of its key (`deepspeed.ops`:
        # `from deepspeed import ops`, `import deepspeed.ops.adam`); `import deepspeed` alone is not one
        return any(parts <= lex.imported for parts in _LIBRARY_IMPORTS) or (
            any(name == "__import__" or dynamic_importer(name) for name in lex.names)
            and any_string(lex, lambda s: library_of(s) is not None)
        )

    def visit_Import(self, node: cst.Import) -> None:
        seen: set[str] = set()
        for alias in node.names:
            module = dotted(alias.name)
            library = library_of(module) if module else None
            if library and _top(library) not in seen:
                seen.add(_top(library))
                self._report(alias, module, {library})

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None:
            return
        module = dotted(node.module)
        names = (
            []
            if isinstance(node.names, cst.ImportStar)
            else [a.name.value for a in node.names if isinstance(a.name, cst.Name)]
        )
        # `from apex import amp` belongs to `apex.amp`; `from deepspeed import ops` to `deepspeed.ops`
        libraries = {lib for lib in (library_of(f"{module}.{name}") for name in names) if lib}
        if not libraries and (library := library_of(module)):
            libraries = {library}
        if libraries:
            self._report(node, module, libraries)

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.call_name(node) == "__import__" or is_dynamic_import(node):
            first = positional(node, 0)
            module = string_value(first.value) if first else None
            if module and (library := library_of(module)):
                self._report(node, module, {library})

    def _report(self, node: cst.CSTNode, module: str, libraries: set[str]) -> None:
        libraries = {lib for lib in libraries if not self._inside(lib) and not self._again_in_function(lib)}
        if not libraries:
            return
        replacement = "; ".join(dict.fromkeys(LIBRARIES[lib] for lib in sorted(libraries)))
        optional = self.OPTIONAL if self._optional(libraries) else ""
        self.report(
            node,
            self.message.format(module=module, optional=optional, replacement=replacement),
            replacement=replacement,
        )

    def _again_in_function(self, library: str) -> bool:
        """Whether the function around the import already imported `library` (reported once per function:
        llamafactory's `apply_liger_kernel` imports liger-kernel once per model type, 20 findings for one
        port; review 44)."""
        function = innermost_function(self.ctx.stack)
        if function is None:
            return False
        key = (id(function), _top(library))
        if key in self._per_function:
            return True
        self._per_function.add(key)
        return False

    def _inside(self, library: str) -> bool:
        """Whether the file is in `library`'s own package folder (liger-kernel's modules import one another:
        the library is not their dependency, it is them; review 42 found 1,209 such findings). DeepSpeed's
        runtime importing `deepspeed.ops` is still reported (it is outside that package), and so is a module
        merely named after the library (hqq's `backends/marlin.py`)."""
        folder = self.ctx.path.replace("\\", "/").rpartition("/")[0].replace("/", ".")
        return f".{folder}.".find(f".{library}.") != -1

    def _optional(self, libraries: set[str]) -> bool:
        """Whether the import sits in the body of a `try` that handles ImportError (or any exception) with a
        fallback: a handler that raises or imports the library again (ultralytics installs TensorRT, then
        imports it) makes no fallback."""
        for child, parent in zip(reversed(self.ctx.stack), reversed(self.ctx.stack[:-1]), strict=False):
            if isinstance(parent, (cst.Try, cst.TryStar)) and child is parent.body:
                return any(
                    _catches_import_error(handler)
                    and not exits(handler.body)
                    and imported_library(getattr(handler.body, "body", ())) not in libraries
                    for handler in parent.handlers
                )
        return False


def imported_library(statements) -> str | None:
    """The first CUDA-only library that one of `statements` (simple statements) imports, if any."""
    for statement in statements:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            modules = []
            if isinstance(small, cst.Import):
                modules = [dotted(alias.name) for alias in small.names]
            elif isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
                modules = [dotted(small.module)]
            for module in modules:
                if module and (library := library_of(module)):
                    return library
    return None


def _top(library: str) -> str:
    return library.split(".")[0]


def _catches_import_error(handler: cst.ExceptHandler | cst.ExceptStarHandler) -> bool:
    if handler.type is None:
        return True
    kinds = (
        [e.value for e in handler.type.elements] if isinstance(handler.type, cst.Tuple) else [handler.type]
    )
    return any(dotted(kind) in _IMPORT_ERRORS for kind in kinds)
