"""Hugging Face's naive model parallelism: `model.parallelize(device_map)`, which spread a model's blocks over
`cuda:0`, `cuda:1`, … (T5, GPT-2 and models copied from them, such as LAVIS's BLIP-2 T5).

Transformers deprecated the API in 4.27 (huggingface/transformers#21448: `from_pretrained(device_map=...)`
does the same) and removed it in v5 (#41166), `transformers.utils.model_parallel_utils` with it. Its code is
CUDA's by construction and runs only after `parallelize()`: the `parallelize` / `deparallelize` methods
themselves, and the `if self.model_parallel:` blocks that move tensors between the blocks' GPUs. Porting it
gains nothing; it goes with the API.
"""

from __future__ import annotations

import libcst as cst

from neuron_migrate.migrate.names import dotted

#: the helpers a module uses when it implements the API (`get_device_map(n_blocks, range(n_gpus))`)
_HELPERS = ("model_parallel_utils.get_device_map", "model_parallel_utils.assert_device_map")
_METHODS = frozenset({"parallelize", "deparallelize"})

NAIVE_MODEL_PARALLEL = (
    "it is Hugging Face's naive model parallelism (`{where}`, with `model_parallel_utils`), which "
    "transformers deprecated in 4.27 and removed in v5 (`from_pretrained(device_map=...)` splits a model "
    "now): remove it with that API rather than port it"
)


def naive_model_parallel(ctx, stack: tuple[cst.CSTNode, ...]) -> str | None:
    """Where the finding sits in the module's naive model-parallel code, as text (`parallelize()`, `if
    self.model_parallel:`), or None (also for a module that does not implement the API)."""
    if not any(name.endswith(_HELPERS) for name in ctx.scopes.module_table.values()):
        return None
    for parent, child in zip(stack, (*stack[1:], None), strict=True):
        if isinstance(parent, cst.FunctionDef) and parent.name.value in _METHODS:
            return f"{parent.name.value}()"
        if isinstance(parent, cst.If) and child is parent.body and _tests_model_parallel(parent.test):
            return "if self.model_parallel:"
    return None


def _tests_model_parallel(test: cst.BaseExpression) -> bool:
    """`self.model_parallel`, alone or as a part of an `and`."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _tests_model_parallel(test.left) or _tests_model_parallel(test.right)
    return dotted(test) == "self.model_parallel"
