"""Record every ATen op a model runs, with dtypes, counts, phase and the user's line that caused it.

`OpRecorder` is a `TorchDispatchMode`: it sees ops after composite (CompositeImplicitAutograd) decomposition.
To record what a `neuron` backend is asked to run, ops for which the opdb snapshot claims no neuron kernel but
which have a composite kernel are run through that kernel with the recorder re-entered, so their callees are
recorded instead (`op_route`); the stand-in device applies the same rule, so both see the same ops. Only ops
that touch the device are recorded. Call sites are the innermost frame outside torch, neuron_migrate and the
standard library. Backward ops run inside autograd nodes, often on a device thread with no user frame; a
`TorchFunctionMode` above autograd (`_GradFnSites`) stamps each new node with the forward line that created
it (in the node's `metadata` dict, so nothing keeps graphs alive), and backward ops take their node's line
(`torch._C._current_autograd_node()`), else the line of the last stamped node seen.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from neuron_migrate.model import CallSite, OpUse
from neuron_migrate.opdb.tracer.routing import (  # noqa: F401 - op_dtypes, claims_kernel: part of this module's API
    call_op,
    claims_kernel,
    op_dtypes,
    op_name,
    op_route,
    run_composite,
    tensors_on,
    worst_support,
)

_SITE_KEY = "neuron_migrate_site"
_DTYPE_NAMES: dict[frozenset, tuple[str, ...]] = {}
Site = tuple[str, int, str]


# --- call sites ---------------------------------------------------------------------------------------------


class SiteFinder:
    """Finds the innermost user frame and names it relative to the target's root."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = str(Path(root).resolve())
        stdlib = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}
        self._skip_prefixes = tuple(
            [str(Path(torch.__file__).parent) + os.sep, str(Path(__file__).parents[1]) + os.sep]
            + [str(Path(p).resolve()) + os.sep for p in stdlib]
        )
        self._files: dict[str, str | None] = {}

    def display_name(self, filename: str) -> str | None:
        """Display path of a user file, or None when the file is torch, ours or the standard library."""
        shown = self._files.get(filename, False)
        if shown is False:
            shown = self._files[filename] = self._classify(filename)
        return shown  # type: ignore[return-value]

    def _classify(self, filename: str) -> str | None:
        if filename.startswith("<"):
            return None if filename.startswith("<frozen") else filename
        path = os.path.realpath(filename)
        parts = Path(path).parts
        for marker in ("site-packages", "dist-packages"):
            if marker in parts:  # third-party code (transformers, …): name it the way it is imported
                rest = parts[len(parts) - parts[::-1].index(marker) :]
                return None if rest[:1] == ("torch",) else "/".join(rest)
        if path.startswith(self._skip_prefixes):
            return None
        if path.startswith(self.root + os.sep):
            return Path(os.path.relpath(path, self.root)).as_posix()
        return Path(path).as_posix()

    def find(self, depth: int = 2) -> Site | None:
        """The innermost user frame above the caller, or None when there is no user code on the stack."""
        frame = sys._getframe(depth)
        while frame is not None:
            shown = self.display_name(frame.f_code.co_filename)
            if shown is not None:
                return (shown, frame.f_lineno, frame.f_code.co_name)
            frame = frame.f_back
        return None


# --- the recorder -------------------------------------------------------------------------------------------


class OpRecorder(TorchDispatchMode):
    """Counts op calls by (op, dtypes, phase) with per-site counts. Enter with `recording()`."""

    def __init__(
        self, snapshot: Any, root: str | os.PathLike[str] = ".", device_type: str = "neuron"
    ) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.device_type = device_type
        self.fake_mode: Any = None  # set by the tracer when it runs under FakeTensorMode
        self.sites = SiteFinder(root)
        self.calls: dict[tuple[str, tuple[str, ...], str], Counter[Site | None]] = {}
        self.notes: list[str] = []
        self.in_optimizer = 0
        self.in_backward = 0
        self.last_node_site: Site | None = None
        self._lock = threading.Lock()

    def phase(self, node: Any = None) -> str:
        """Optimizer inside an optimizer step, backward inside autograd, else forward."""
        if self.in_optimizer:
            return "optimizer"
        if node is not None or self.in_backward or torch._C._current_autograd_node() is not None:
            return "backward"
        return "forward"

    def _site(self, node: Any) -> Site | None:
        if node is not None:
            site = node.metadata.get(_SITE_KEY)
            if site is not None:
                self.last_node_site = site
                return site
            if self.last_node_site is not None:
                return self.last_node_site
        return self.sites.find(3)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = op_name(func)
        if name is None:
            return func(*args, **kwargs)
        route = op_route(self.snapshot, func, name)
        if self.fake_mode is not None and name == "aten::lift_fresh" and hasattr(args[0], "elem"):
            return _lift_to_fake(self.fake_mode, args[0])
        if route == "silent":
            return call_op(func, args, kwargs)
        # Only ops that touch the device count: CPU-side work (data prep, AdamW's step counter) never reaches
        # it.
        found, on_device = tensors_on((*args, *kwargs.values()) if kwargs else args, self.device_type)
        if route == "decompose" and on_device:
            with self:  # re-enter: the callees are what the device runs, so they are what we record
                return run_composite(func, args, kwargs)
        try:
            out = call_op(func, args, kwargs)
        except Exception as err:
            out = _data_dependent(self, name, func, args, kwargs, err)
        if not found:  # factories: the output decides
            found, on_device = tensors_on(out if isinstance(out, (list, tuple)) else (out,), self.device_type)
        if not on_device:
            return out
        dtypes = _DTYPE_NAMES.get(frozenset(found))
        if dtypes is None:
            dtypes = _DTYPE_NAMES[frozenset(found)] = tuple(
                sorted(str(d).removeprefix("torch.") for d in found)
            )
        node = torch._C._current_autograd_node()
        key = (name, dtypes, self.phase(node))
        site = self._site(node)
        with self._lock:
            counter = self.calls.get(key)
            if counter is None:
                counter = self.calls[key] = Counter()
            counter[site] += 1
        return out

    def uses(self, snapshot: Any, observed: Any = None, top_sites: int = 10) -> list[OpUse]:
        """One OpUse per (op, dtypes, phase): counts, top call sites, the snapshot's prediction and, if given,
        `observed(op) -> status | None` from the device's tracking API."""
        result = []
        for (op, dtypes, phase), counter in sorted(self.calls.items()):
            support = worst_support(snapshot, op, dtypes)
            sites = tuple(
                CallSite(path=s[0], line=s[1], function=s[2], count=n)
                for s, n in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0] or ("", 0, "")))
                if s is not None
            )[:top_sites]
            result.append(
                OpUse(
                    op=op,
                    dtypes=dtypes,
                    count=sum(counter.values()),
                    phase=phase,  # type: ignore[arg-type]
                    call_sites=sites,
                    status=support.status,
                    note=support.note,
                    source=support.source,
                    observed=observed(op) if observed is not None else None,
                )
            )
        return result

    def note(self, text: str) -> None:
        """Add a note once (e.g. a data-dependent op under --fake)."""
        if text not in self.notes:
            self.notes.append(text)


class _GradFnSites(TorchFunctionMode):
    """Above autograd: stamp new autograd nodes with the user line, and flag `Tensor.backward` as backward."""

    _BACKWARD = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)

    def __init__(self, recorder: OpRecorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in self._BACKWARD:
            self.recorder.in_backward += 1
            try:
                return func(*args, **kwargs)
            finally:
                self.recorder.in_backward -= 1
        out = func(*args, **kwargs)
        if torch._C._current_autograd_node() is None:
            self._stamp(out)
        return out

    def _stamp(self, out: Any) -> None:
        outs = out if isinstance(out, (list, tuple)) else (out,)
        site: Site | None = None
        for t in outs:
            node = t.grad_fn if isinstance(t, torch.Tensor) else None
            if node is None or _SITE_KEY in node.metadata:
                continue
            if site is None:
                site = self.recorder.sites.find(3)
                if site is None:
                    return
            # Nodes made inside C++ composites (LogSoftmaxBackward0 inside cross_entropy) have no Python call
            # of their own: walk back from the output node and stamp every unstamped node with the same line.
            todo = [node]
            while todo:
                n = todo.pop()
                meta = n.metadata
                if _SITE_KEY in meta:
                    continue
                meta[_SITE_KEY] = site
                todo.extend(nxt for nxt, _ in n.next_functions if nxt is not None)


def _data_dependent(
    recorder: OpRecorder, name: str, func: Any, args: Any, kwargs: Any, err: Exception
) -> Any:
    """Under FakeTensorMode, stand in for an op whose output depends on tensor values; other errors
    re-raise."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

    if not isinstance(err, (DataDependentOutputException, DynamicOutputShapeException)):
        raise err
    site = recorder.sites.find(4)
    where = f" at {site[0]}:{site[1]}" if site else ""
    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if name == "aten::_local_scalar_dense" and x is not None:
        recorder.note(f"{name}{where}: reads a tensor value (.item()/bool/int); the fake run assumed 0")
        return False if x.dtype == torch.bool else (0.0 if x.is_floating_point() else 0)
    if name == "aten::nonzero" and x is not None:
        recorder.note(
            f"{name}{where}: output size depends on values; the fake run assumed every element nonzero"
        )
        return x.new_empty((x.numel(), x.dim()), dtype=torch.long)
    if name == "aten::masked_select" and x is not None:
        recorder.note(f"{name}{where}: output size depends on values; the fake run assumed all selected")
        return x.new_empty((x.numel(),))
    recorder.note(
        f"{name}{where}: output depends on tensor values, which a fake run does not have; "
        "the trace stopped here (trace on the stand-in device instead of --fake)"
    )
    raise TraceStopped(name) from err


def _lift_to_fake(fake_mode: Any, tensor: Any) -> Any:
    """`torch.tensor(data, device=...)` builds its tensor outside the modes, so under FakeTensorMode it is a
    real (stand-in) tensor; make it a fake one on the same device so it mixes with the fake model."""
    from torch._subclasses.fake_tensor import FakeTensor

    return FakeTensor(fake_mode, tensor.elem.to("meta"), tensor.device)


class TraceStopped(Exception):
    """A --fake trace met a data-dependent op it cannot stand in for; the ops before it are kept."""


@contextmanager
def recording(recorder: OpRecorder, autograd: bool = True) -> Iterator[OpRecorder]:
    """Record everything run inside: the function mode (sites of autograd nodes), optimizer-step hooks, and
    the dispatch mode. Optimizer hooks are global (`register_optimizer_step_pre_hook`), so scripts that build
    their own optimizer are covered too. `autograd=False` (forward-only runs) skips the function mode."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    def pre(*_: Any) -> None:
        recorder.in_optimizer += 1

    def post(*_: Any) -> None:
        recorder.in_optimizer = max(0, recorder.in_optimizer - 1)

    with ExitStack() as stack:
        stack.callback(register_optimizer_step_pre_hook(pre).remove)
        stack.callback(register_optimizer_step_post_hook(post).remove)
        if autograd:
            stack.enter_context(_GradFnSites(recorder))
        stack.enter_context(recorder)
        yield recorder
