"""Code that is CUDA's by its neighbours: what its call pairs a device with, or the table a function is
stored in (used by `cuda_context`).

- The call's other arguments name CUDA-only facts (cuDNN, MIOpen, ROCm/HIP, NCCL, cuBLAS, CUTLASS, NVIDIA):
  `DecorateInfo(..., active_if=(TEST_CUDNN and not TEST_WITH_ROCM), device_type="cuda")` is about CUDA's
  cuDNN, and the accelerator's type there would say the same of `neuron` (or, without one, of the CPU).
- They name a process-group backend (`ProcessGroup.BackendType.GLOO`, `"nccl"`): the call pairs CUDA with a
  backend that may not serve other devices (`pg._register_backend(torch.device("cuda"), BackendType.GLOO,
  ...)`: gloo only moves CPU and CUDA tensors). A person registers the accelerator's own backend instead.
- It is Ray's GPU resource: the value of `num_gpus` (or Ray Train's `use_gpu`) in a call or a dict that asks
  Ray for resources (the module imports `ray`, or the same request names `num_cpus`), or a name `num_gpus`
  assigned in a module that imports `ray`. Ray counts NVIDIA GPUs there; Trainium is its `neuron_cores`
  resource, so an accelerator's answer would ask for GPUs a Trainium host does not have (torchrl's
  collectors: `"num_gpus": 0.2 if torch.cuda.is_available() else None`).
- It passes `device_type="cuda"` (or `device="cuda"`) to a function the module also calls with other device
  types under the same keyword (`device_type="cpu"`, `"mps"`, `device="xpu"`): one entry of a per-device
  choice, which stays CUDA's.

Names only count, not strings (a file name such as `"gpu_model.pt"` says nothing), except a backend's name.

A CUDA function that is stored, not called, in a list, tuple, set or dict (as a value or a key), or assigned
to a subscript (`constant_fold_functions = [..., torch.cuda.current_device, ...]`,
`BACKEND_DEVICE_COUNT["xla"] = torch.cuda.device_count`, `{torch.cuda.synchronize: "cuda"}`), is an entry of a
table: the table holds that very function (a registry keyed by function identity, one device's entry), so
another function there changes what the table means. One passed to a call (`@register(...,
torch.cuda.synchronize)`, `timer(sync=torch.cuda.synchronize)`) may be kept the same way by the callee
(torch's Dynamo registered `torch.accelerator.synchronize` twice after such a rewrite, and every
`torch.compile` failed): it is left for a person.
"""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.walk import walk

_CUDA_FACT = re.compile(r"cudnn|miopen|rocm|(?<![a-z])hip(?![a-z])|nccl|nvidia|cublas|cutlass", re.IGNORECASE)
_BACKENDS = frozenset({"gloo", "nccl", "ucc", "mpi"})
#: the keywords a per-device choice passes a device type by (`check_device(a, b, device="xpu")`)
_SELECTOR_KEYWORDS = frozenset({"device_type", "device"})
#: device types other than CUDA, as code passes them to `device_type=`
_OTHER_DEVICE_TYPES = frozenset(
    {"cpu", "mps", "xpu", "hpu", "npu", "mlu", "musa", "meta", "xla", "tpu", "neuron", "privateuseone"}
)
_STATEMENTS = (cst.SimpleStatementLine, cst.BaseCompoundStatement)
#: the keywords Ray reads its (NVIDIA) GPU resource from: `ray.remote(num_gpus=1)`,
#: `ScalingConfig(use_gpu=True)`
_RAY_GPU_KEYS = frozenset({"num_gpus", "use_gpu"})
#: (why, whether a person still has something to do), as `paired_with_cuda` answers
_TABLE_ENTRY = (
    "it is stored in a table, not called: the table holds that very function (a registry, or one device's "
    "entry): no change needed",
    False,
)
_PASSED = (
    "it is passed as a value, not called: the callee may hold that very function (a registry, a dispatch "
    "key), so another function there changes what it means; leave it, or register the accelerator's own",
    True,
)


def paired_with_cuda(ctx, stack: tuple[cst.CSTNode, ...], covered: set[int]) -> tuple[str, bool] | None:
    """Why the device at the end of `stack` is CUDA's by its call (see the module docstring), and whether a
    person still has something to do there; None when its call says nothing. `covered`: ids of the nodes
    the applied fixes replace (rewritten code mentions nothing)."""
    if (key := _ray_gpu_resource(ctx, stack)) is not None:
        return (
            f"it is Ray's `{key}` resource, which counts NVIDIA GPUs (Trainium is Ray's `neuron_cores` "
            'resource): keep it CUDA\'s, and ask for `resources={"neuron_cores": n}` where a task needs '
            "Trainium",
            True,
        )
    found = _argument_of_call(stack)
    if found is None:
        return None
    call, arg = found
    others = [a for a in call.args if a is not arg]
    for other in others:
        if (fact := _cuda_fact(other, covered)) is not None:
            return f"the call pairs it with CUDA-only `{fact}`: no change needed", False
    for other in others:
        if (backend := _backend(other)) is not None:
            return (
                f"the call pairs CUDA with the `{backend}` backend, which may not serve other devices: keep "
                "it, and pair the accelerator with its own: `dist.get_default_backend_for_device(device)`",
                True,
            )
    if arg.keyword is not None and arg.keyword.value in _SELECTOR_KEYWORDS:
        keyword = arg.keyword.value
        listed = _selectors(ctx).get((_callee(ctx, call), keyword), set())
        if listed:
            shown = ", ".join(f"`{d}`" for d in sorted(listed)[:3])
            return (
                f"one entry of a per-device choice (the module also passes `{keyword}=` {shown} to "
                f"`{ctx.code(call.func).strip()}`): CUDA's entry stays; add one for `neuron` where it "
                "applies",
                False,
            )
    return None


def _ray_gpu_resource(ctx, stack: tuple[cst.CSTNode, ...]) -> str | None:
    """The Ray GPU keyword, dict key or name (`num_gpus`) whose value holds the node at the end of `stack`,
    if any (see the module docstring); the innermost keyword or key decides."""
    for index in range(len(stack) - 1, 0, -1):
        node, parent = stack[index], stack[index - 1]
        if isinstance(parent, cst.Call) and isinstance(node, cst.Arg) and node.keyword is not None:
            key = node.keyword.value
            asked = {arg.keyword.value for arg in parent.args if arg.keyword is not None}
        elif isinstance(parent, cst.Dict) and isinstance(node, cst.DictElement):
            key = string_value(node.key)
            asked = {string_value(e.key) for e in parent.elements if isinstance(e, cst.DictElement)}
        elif isinstance(parent, cst.Assign) and node is parent.value:
            targets = [t.target.value for t in parent.targets if isinstance(t.target, cst.Name)]
            return next((t for t in targets if t in _RAY_GPU_KEYS and _imports_ray(ctx)), None)
        else:
            if isinstance(node, _STATEMENTS):
                return None
            continue
        return key if key in _RAY_GPU_KEYS and ("num_cpus" in asked or _imports_ray(ctx)) else None
    return None


def _imports_ray(ctx) -> bool:
    """Whether the module's top-level imports bind a name from Ray."""
    return any(q == "ray" or q.startswith("ray.") for q in ctx.scopes.module_table.values())


def _argument_of_call(stack: tuple[cst.CSTNode, ...]) -> tuple[cst.Call, cst.Arg] | None:
    """The innermost call (within the statement) that has the node in one of its arguments, and that
    argument."""
    for index in range(len(stack) - 1, 0, -1):
        node = stack[index]
        if isinstance(node, _STATEMENTS):
            return None
        parent = stack[index - 1]
        if isinstance(node, cst.Arg) and isinstance(parent, cst.Call) and node in parent.args:
            return parent, node
    return None


def _cuda_fact(arg: cst.Arg, covered: set[int]) -> str | None:
    found: list[str] = []

    class Finder(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if found or id(node) in covered:
                return False
            if isinstance(node, cst.Name) and _CUDA_FACT.search(node.value):
                found.append(node.value)
                return False
            return True

    walk(arg.value, Finder())
    return found[0] if found else None


def _backend(arg: cst.Arg) -> str | None:
    """`BackendType.GLOO`, `Backend.NCCL`, `"gloo"`: a process-group backend, by name."""
    value = arg.value
    if isinstance(value, cst.Attribute) and value.attr.value.lower() in _BACKENDS:
        return value.attr.value
    text = string_value(value)
    return text if text is not None and text.lower() in _BACKENDS else None


def _callee(ctx, call: cst.Call) -> str:
    return ctx.call_name(call) or ctx.code(call.func).strip()


def _selectors(ctx) -> dict[str, set[str]]:
    """Per (callee, keyword): the other device types the module passes it as `device_type=` or `device=`
    (computed once a file)."""
    return ctx.once(_selectors, lambda: _collect_selectors(ctx))


def _collect_selectors(ctx) -> dict[str, set[str]]:
    selectors: dict[str, set[str]] = {}
    for call, _ in ctx.calls:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value in _SELECTOR_KEYWORDS:
                value = string_value(arg.value)
                if value in _OTHER_DEVICE_TYPES:
                    selectors.setdefault((_callee(ctx, call), arg.keyword.value), set()).add(value)
    return selectors


def stored_in_table(ctx, stack: tuple[cst.CSTNode, ...], node: cst.CSTNode) -> tuple[str, bool] | None:
    """Why `node`, a `torch.cuda` function named but not called, is an entry of a table or handed to a call,
    and whether a person still has something to do there (see the module docstring)."""
    if not isinstance(node, (cst.Name, cst.Attribute)) or node not in stack:
        return None
    name = ctx.qualified_name(node) or ""
    if not (name.startswith("torch.cuda.") and name.rsplit(".", 1)[-1].islower()):
        return None  # `ProfilerActivity.CUDA` is a value, not a function
    index = stack.index(node)
    parent = stack[index - 1] if index > 0 else None
    if isinstance(parent, (cst.Element, cst.DictElement)):  # a value, or a key: `{torch.cuda.synchronize: 1}`
        return _TABLE_ENTRY
    if isinstance(parent, cst.Arg) and index > 1 and isinstance(stack[index - 2], cst.Call):
        return _PASSED  # `@register(torch.accelerator.synchronize, torch.cuda.synchronize)`
    if (
        isinstance(parent, cst.Assign)
        and parent.value is node
        and all(isinstance(t.target, cst.Subscript) for t in parent.targets)
    ):
        return _TABLE_ENTRY
    return None
