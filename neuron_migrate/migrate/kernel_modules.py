"""Modules that define GPU kernels with a CUDA-only library (`@triton.jit`, `@cuda.jit` after `from numba
import cuda`, `@cute.kernel`), and the project's own ones, for the code of other files that calls them.

torchao's `float8nocompile/kernels/fp8_dynamic_tensorwise.py` defines Triton kernels; its test,
`fp8_dynamic_tensorwise_test.py`, asserts `torch.cuda.is_available()` and moves its inputs to `"cuda"` for
them. Made generic, the test sends neuron tensors to Triton: the kernels have to be ported first, and the
test's CUDA code is right until then (review 40). So the scanner reads, from every file's bytes before any
parse, whether it is such a module (`kernel_library`), and gives each file's analysis the project's list
(`FixStyle.kernel_modules`, part of every cache key: adding a kernel module re-analyses the project);
`cuda_files.project_kernel` then finds the code that uses what one of them defines.

Read from text, not from a tree: the scanner runs this on every file, cached or not, and stays free of
libcst. A kernel module is one that binds a name to a CUDA-only library (`cuda_libraries.LIBRARIES`) with an
unindented import and decorates an unindented definition through that name.
"""

from __future__ import annotations

import re

from neuron_migrate.migrate.cuda_libraries import LIBRARIES, library_of

#: an unindented decorator: the name it starts with
_DECORATOR = re.compile(rb"\n@[ \t]*([A-Za-z_]\w*)")
#: an unindented import of a CUDA-only library (what a kernel module must have, searched first)
_LIBRARY_IMPORT = re.compile(
    rb"\n(?:from|import)[ \t]+(?:"
    + b"|".join(sorted({re.escape(name.split(".")[0].encode()) for name in LIBRARIES}))
    + rb")\b"
)


def kernel_library(data: bytes) -> str | None:
    """The CUDA-only library a module's source defines kernels with (see the module docstring), if any."""
    if b"\n@" not in data or not _LIBRARY_IMPORT.search(b"\n" + data):
        return None
    from neuron_migrate.migrate.lexicon import import_bindings  # only for the few files that get here

    heads = {match.group(1).decode() for match in _DECORATOR.finditer(data)}
    for local, qualified in import_bindings(data.decode("utf-8", "replace"), top_level=True):
        if local in heads and (library := library_of(qualified)) is not None:
            return library
    return None


def module_name(rel: str) -> str:
    """The dotted module name a file's path relative to the scan's root spells (`pkg/__init__.py`: `pkg`)."""
    dotted = rel.replace("\\", "/").removesuffix(".py").replace("/", ".")
    return dotted.removesuffix(".__init__")
