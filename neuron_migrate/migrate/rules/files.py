"""Rules about whole files: CUDA sources in the tree, and files the scan could not analyse (NM9xx).

These rules have no visitor: the scanner reports them from what it finds on disk.
"""

from __future__ import annotations

from neuron_migrate.migrate.rule import Rule


class CudaSourceFile(Rule):
    """A CUDA C++ source file (`.cu` / `.cuh`) in the tree.

    What it does
    Reports every `.cu` and `.cuh` file under the scanned paths.

    Why it matters on Trainium
    CUDA kernels do not run on NeuronCores. Each kernel must be replaced by PyTorch operators that TorchNeuron
    runs natively, or ported to an NKI kernel (`@nki.jit` registered with `torch_neuronx`'s `nki_op`).

    Example
    csrc/fused_op_kernel.cu

    Use instead
    A composition of PyTorch ops, or an NKI kernel registered as a custom op.

    Fix safety
    No automatic fix: a port is manual work.
    """

    code = "NM703"
    name = "cuda-source-file"
    message = "CUDA source file: port the kernel to PyTorch ops or an NKI kernel"
    severity = "error"
    file_level = "kernel-source"
    effort = "custom-kernel"


class ParseError(Rule):
    """A file that is not valid Python 3.

    What it does
    Reports files that libcst cannot parse (syntax errors, Python 2 code, broken notebooks).

    Why it matters on Trainium
    The scan cannot see what such a file does on CUDA, so its migration effort is unknown.

    Example
    print "hello"

    Use instead
    Fix the syntax, or exclude the file with `--exclude` / `[tool.neuron-migrate] exclude`.

    Fix safety
    No automatic fix.
    """

    code = "NM901"
    name = "parse-error"
    message = "cannot parse file"
    severity = "error"
    file_level = "unparsable"
    effort = "unanalysed-file"


class UnreadableFile(Rule):
    """A file that cannot be read or decoded.

    What it does
    Reports files that are not text in their declared encoding, contain NUL bytes, are larger than the
    size limit, are broken or looping symlinks, or cannot be opened.

    Why it matters on Trainium
    The scan cannot see inside the file, so it may hide CUDA-specific code.

    Example
    a symlink whose target was deleted

    Use instead
    Repair or exclude the file.

    Fix safety
    No automatic fix.
    """

    code = "NM902"
    name = "unreadable-file"
    message = "cannot read file"
    severity = "error"
    file_level = "unreadable"
    effort = "unanalysed-file"


class AnalysisError(Rule):
    """A file whose analysis failed inside neuron-migrate.

    What it does
    Reports a file on which a rule raised an unexpected error; the rest of the run goes on.

    Why it matters on Trainium
    Findings in this file may be missing. This is a bug in neuron-migrate: please report it.

    Example
    (no example: it depends on the bug)

    Use instead
    Rerun with `--debug` and report the file and traceback.

    Fix safety
    No automatic fix.
    """

    code = "NM903"
    name = "analysis-error"
    message = "analysis failed"
    severity = "error"
    file_level = "analysis-failure"
    effort = "unanalysed-file"
