"""How a device backend meets an ATen op: its name and dtypes as both the recorder and the stand-in spell
them, and its route — recorded as itself, decomposed through its composite kernel, or silent — decided from
the opdb snapshot the same way for the recorder, the pure-Python stand-in and the C++ one
(`device_kernels`)."""

from __future__ import annotations

from typing import Any

import torch

from neuron_migrate.opdb.db import base_name, normalize_op

_NOISE_NAMESPACES = ("prim", "profiler")
_RANK = {"native": 0, "unknown": 1, "cpu_fallback": 2, "unsupported": 3}
_NAMES: dict[Any, str | None] = {}


# --- op identity shared with the stand-in device: both must name and type an op call the same way -----------


def op_name(func: Any) -> str | None:
    """`aten::add.Tensor` / `aten::relu` for an OpOverload; None for non-computing noise (`prim::device`)."""
    name = _NAMES.get(func, False)
    if name is False:
        text = str(func)
        name = None if text.split(".", 1)[0] in _NOISE_NAMESPACES else normalize_op(text)
        _NAMES[func] = name
    return name  # type: ignore[return-value]


def op_dtypes(args: Any, kwargs: Any, out: Any = None) -> tuple[str, ...]:
    """Sorted dtype names of the tensor inputs (one level of lists included); of the outputs when none."""
    found: set[torch.dtype] = set()
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            found.add(value.dtype)
        elif isinstance(value, (list, tuple)):
            found.update(v.dtype for v in value if isinstance(v, torch.Tensor))
    if not found and out is not None:
        outs = out if isinstance(out, (list, tuple)) else (out,)
        found.update(v.dtype for v in outs if isinstance(v, torch.Tensor))
    return tuple(sorted(str(d).removeprefix("torch.") for d in found))


def tensors_on(value: Any, device_type: str) -> tuple[set[torch.dtype], bool]:
    """Dtypes of the tensors in `value` (a tuple of args/outputs, one level of lists) and whether any is on
    `device_type`."""
    found: set[torch.dtype] = set()
    on_device = False
    for item in value:
        items = item if isinstance(item, (list, tuple)) else (item,)
        for t in items:
            if isinstance(t, torch.Tensor):
                found.add(t.dtype)
                on_device = on_device or t.device.type == device_type
    return found, on_device


# Composite-explicit ops whose kernel builds the result itself (no further dispatch): metadata only on a
# backend.
METADATA_ONLY = frozenset({"aten::alias", "aten::_unsafe_view", "aten::detach", "aten::lift_fresh"})
_COMPOSITE_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd")
_ROUTES: dict[tuple[int, Any], tuple[str, Any]] = {}
_COMPOSITE_OF: dict[Any, Any] = {}


def claims_kernel(snapshot: Any, op: str) -> bool:
    """Whether the snapshot says neuron has its own kernel for the overload (native, an explicit CPU-fallback
    registration, or an unsupported-raising one). An entry whose route is the boxed fallback, or `unknown`,
    claims none: on a backend such an op runs its composite kernel, if it has one, not the boxed fallback."""
    entry = snapshot.entry(op)
    if entry is None:
        base = snapshot.entry(base_name(op))
        entry = base if base is not None and getattr(base, "all_overloads", False) else None
    if entry is None or entry.status == "unknown":
        return False
    return not (entry.status == "cpu_fallback" and entry.route == "boxed-fallback")


def op_route(snapshot: Any, func: Any, name: str) -> str:
    """How a device backend meets this op: "record" (neuron has a kernel, or the op has no composite one),
    "decompose" (no neuron kernel, so the backend runs the op's composite kernel and its callees decide) or
    "silent" (no neuron kernel and that composite is metadata only: nothing is executed or tracked)."""
    key = (id(snapshot), func)
    hit = _ROUTES.get(key)
    if hit is None or hit[1] is not snapshot:
        route = "record"
        if not claims_kernel(snapshot, name) and any(
            torch._C._dispatch_has_kernel_for_dispatch_key(name, k) for k in _COMPOSITE_KEYS
        ):
            route = "silent" if name in METADATA_ONLY else "decompose"
        hit = _ROUTES[key] = (route, snapshot)
    return hit[0]


def device_kernels(snapshot: Any, exclude: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """The aten overloads a C++ device backend must give its own (tracked) kernel so that it runs what the
    recorder records: those with a composite-explicit kernel that `op_route` records as themselves (the opdb
    claims a neuron kernel, or the composite is only the non-functional one the recorder does not decompose).
    Without its own kernel the dispatcher would run the composite there. Composite-implicit overloads are left
    out: a backend kernel for one would take it out of autograd. Names are without the `aten::` prefix."""

    def has(name: str, key: str) -> bool:
        try:
            return torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
        except RuntimeError:  # a TorchScript-only schema, unknown to the dispatcher
            return False

    names = []
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        short = schema.name[len("aten::") :] + (f".{schema.overload_name}" if schema.overload_name else "")
        name = "aten::" + short
        if short in exclude or has(name, "CompositeImplicitAutograd"):
            continue
        explicit = has(name, "CompositeExplicitAutograd")
        if not (explicit or has(name, "CompositeExplicitAutogradNonFunctional")):
            continue  # no composite: the boxed fallback reaches it anyway
        if claims_kernel(snapshot, normalize_op(name)) or not explicit:
            names.append(short)
    return names


def run_composite(func: Any, args: Any, kwargs: Any) -> Any:
    """Run an op through its composite kernel, so its callees dispatch (and are seen) one by one. Implicit
    composites reach a backend only when called from inside another kernel (autograd is then excluded)."""
    key = _COMPOSITE_OF.get(func, False)
    if key is False:
        name = op_name(func)
        key = _COMPOSITE_OF[func] = next(
            (k for k in _COMPOSITE_KEYS if torch._C._dispatch_has_kernel_for_dispatch_key(name, k)), None
        )
    if key is None:
        return func(*args, **kwargs)
    args = _coerce_numbers(func, args)
    if key == "CompositeImplicitAutograd":
        return _refresh(func.decompose(*args, **kwargs))
    return _refresh(func._op_dk(getattr(torch._C.DispatchKey, key), *args, **kwargs))


def _refresh(value: Any) -> Any:
    """A composite kernel often fills an empty result through an out= callee that resizes it (logsumexp ->
    logsumexp.out). A wrapper subclass (the stand-in's tensors hold their data in `.elem`) keeps its old
    shape while the data it wraps was resized: give such a result a fresh wrapper, so autograd records the
    real shape."""
    elem = getattr(value, "elem", None)
    if isinstance(value, torch.Tensor) and isinstance(elem, torch.Tensor):
        return type(value)(elem) if value.shape != elem.shape else value
    if isinstance(value, (list, tuple)):
        return type(value)(_refresh(v) for v in value)
    return value


def _coerce_numbers(func: Any, args: Any) -> list[Any]:
    # A composite kernel's wrapped-number argument reaches Python as a plain number although the callee's
    # schema wants a Tensor (remainder.Scalar -> remainder.Tensor(self, 3)); give it back a 0-dim tensor.
    schema = func._schema.arguments
    return [
        torch.tensor(v)
        if isinstance(v, (int, float, bool)) and i < len(schema) and str(schema[i].type) == "Tensor"
        else v
        for i, v in enumerate(args)
    ]


def call_op(func: Any, args: Any, kwargs: Any) -> Any:
    """`func(*args, **kwargs)`, retried with wrapped numbers restored as 0-dim tensors when that is the
    problem."""
    try:
        return func(*args, **kwargs)
    except RuntimeError as err:
        if "Expected a value of type 'Tensor'" not in str(err):
            raise
    return func(*_coerce_numbers(func, args), **kwargs)


def worst_support(snapshot: Any, op: str, dtypes: tuple[str, ...]) -> Any:
    """The snapshot's answer for the dtype that fares worst (native < unknown < cpu_fallback <
    unsupported)."""
    if not dtypes:
        return snapshot.lookup(op, None)
    answers = [snapshot.lookup(op, d) for d in dtypes]
    return max(answers, key=lambda s: _RANK.get(s.status, 1))
