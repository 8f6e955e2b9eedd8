"""Where code only runs on CUDA, so its CUDA calls are right as they are (used by `settle`).

A fix is withdrawn, with a note saying why, when its code:

- is in a file, or inside a function, whose name says it is about CUDA (`torch/cuda/memory.py`,
  `cuda_utils.py`, `def cuda(self)`, `is_torch_cuda_available`);
- only runs when a test that is about CUDA and stays CUDA's holds: the body of an `if`/`while`/conditional
  whose test mentions CUDA in code no fix of this run rewrites (`elif is_torch_cuda_available():`,
  `if len(torch.cuda.default_generators) > 0:`), or the `else` of such a test when it is negated;
- is an argument of CUDA-only code that stays
  (`torch.cuda.get_device_properties(torch.cuda.current_device())`);
- is the function under a `"cuda"` key of a dict (a per-device dispatch table,
  `{"cuda": torch.cuda.synchronize, "xpu": ...}`: each device has its own entry).

"Mentions CUDA" means a name or attribute containing `cuda`, `nvidia`, `cublas`, `cudnn` or `nccl`, a call of
a function whose name contains `gpu`, a string containing `cuda`, `gpu` or `nvidia`, or a CUDA-only library or
capability name (`patterns.CUDA_ONLY_CODE`, ROCm/HIP included), outside the code that the fixes applied in
this run replace.
"""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.migrate.guards import implies
from neuron_migrate.migrate.patterns import CUDA_ONLY_CODE

_STRING_CUE = re.compile(r"cuda|gpu|nvidia", re.IGNORECASE)
_NAME_CUE = re.compile(r"cuda|nvidia|cublas|cudnn|nccl", re.IGNORECASE)
_FUNCTIONS = (cst.FunctionDef, cst.Lambda)


class CudaMentions:
    """Answers "does this code mention CUDA" outside the nodes `covered` (those the applied fixes replace) and
    outside availability tests (`torch.cuda.is_available()`, `x.is_cuda`, `d.type == "cuda"`: the device
    rules rewrite those, or keep them as CUDA checks, themselves)."""

    def __init__(self, ctx, covered: set[int]) -> None:
        self.ctx = ctx
        self.covered = covered

    def find(self, node: cst.CSTNode) -> str | None:
        """The first CUDA mention in `node`, as text, or None."""
        found: list[str] = []
        covered, ctx = self.covered, self.ctx

        class Finder(cst.CSTVisitor):
            def on_visit(self, child: cst.CSTNode) -> bool:
                if found or id(child) in covered:
                    return False
                if (
                    isinstance(child, (cst.Call, cst.Attribute, cst.Comparison))
                    and implies(ctx, child)[0] == "certain"
                ):
                    return False
                text = None
                if isinstance(child, cst.Name) and (
                    _NAME_CUE.search(child.value) or CUDA_ONLY_CODE.search(child.value)
                ):
                    text = child.value
                elif isinstance(child, cst.Call) and "gpu" in ctx.code(child.func).lower():
                    text = ctx.code(child.func)  # `is_torch_bf16_gpu_available()`: a GPU capability query
                elif isinstance(child, (cst.SimpleString, cst.FormattedStringText)) and _STRING_CUE.search(
                    child.value
                ):
                    text = child.value.strip("'\"")
                if text is not None:
                    found.append(text if len(text) <= 40 else text[:37] + "...")
                    return False
                return True

        node.visit(Finder())
        return found[0] if found else None


def covered_nodes(pendings: list, applies) -> set[int]:
    """ids of every node inside the replacement nodes of the fixes this run applies."""
    covered: set[int] = set()

    class Collect(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            covered.add(id(node))
            return True

    for pending in pendings:
        if applies(pending):
            for replacement in pending.fix.replacements:
                replacement.node.visit(Collect())
    return covered


def cuda_file(path: str) -> bool:
    """Whether a file is CUDA's by its name or package (`torch/cuda/memory.py`, `cuda_utils.py`); a project
    folder's name (`cuda_project/train.py`) says nothing about one file."""
    parts = path.replace("\\", "/").split("/")
    stem = parts[-1].lower().removesuffix(".py").removesuffix(".ipynb")
    return any(part.lower() == "cuda" for part in parts[:-1]) or "cuda" in stem


def only_on_cuda(pending, mentions: CudaMentions, leftovers: list, path: str = "") -> str | None:
    """Why the code of `pending` only runs on CUDA (see the module docstring), or None."""
    if cuda_file(path):
        return "the file is about CUDA by its name: leave it, or port it by hand"
    stack = pending.stack
    start = next((i for i in range(len(stack) - 1, -1, -1) if isinstance(stack[i], _FUNCTIONS)), 0)
    function = stack[start] if isinstance(stack[start], cst.FunctionDef) else None
    if function is not None and "cuda" in function.name.value.lower():
        return (
            f"it is in `{function.name.value}`, which is about CUDA by its name: leave it, or rename the "
            "function and port it by hand"
        )
    for index in range(start, len(stack) - 1):
        parent, child = stack[index], stack[index + 1]
        if isinstance(parent, (cst.If, cst.While, cst.IfExp)) and child is not parent.test:
            negated = isinstance(parent.test, cst.UnaryOperation) and isinstance(
                parent.test.operator, cst.Not
            )
            in_true_branch = child is parent.body
            if in_true_branch != negated and (cue := mentions.find(parent.test)) is not None:
                return f"it only runs when a CUDA test holds (`{cue}`): no change needed"
        elif (
            isinstance(parent, cst.DictElement)
            and child is parent.value
            and isinstance(child, (cst.Name, cst.Attribute))
            and isinstance(parent.key, cst.SimpleString)
            and (parent.key.evaluated_value == "cuda")
        ):
            return "it is CUDA's entry of a per-device table: add an entry for the accelerator instead"
    for leftover in leftovers:
        if leftover is not pending and leftover.node in stack and leftover.node is not pending.node:
            return "it is an argument of CUDA-only code that stays: no change needed"
    return None
