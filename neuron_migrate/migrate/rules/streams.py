"""NM406: CUDA streams and events (`torch.cuda.Stream`, `Event`, `stream()`, `current_stream()`)."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.context import PendingFinding
from neuron_migrate.migrate.names import dotted
from neuron_migrate.migrate.naming import scope_of
from neuron_migrate.migrate.patterns import QualifiedNameRule, call_args, guarded_fix
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement
from neuron_migrate.migrate.walk import walk

_TARGETS = {
    "Stream": "torch.Stream",
    "Event": "torch.Event",
    "stream": None,  # rewritten to its argument: `with s:`
    "current_stream": "torch.accelerator.current_stream",  # a torch.Stream (torch.mps has no current_stream)
    "set_stream": "torch.accelerator.set_stream",
    "default_stream": None,
}
_MESSAGES = {
    "Stream": "`torch.cuda.Stream` is CUDA-only: use `torch.Stream`, which takes the current accelerator",
    "Event": "`torch.cuda.Event` is CUDA-only: use `torch.Event`, which takes the current accelerator",
    "stream": "`torch.cuda.stream(s)` selects a CUDA stream only: use the stream as the context manager "
    "(`with s:`)",
    "current_stream": "`torch.cuda.current_stream` is CUDA-only: use `torch.accelerator.current_stream()`",
    "set_stream": "`torch.cuda.set_stream` is CUDA-only: use `torch.accelerator.set_stream`",
    "default_stream": "`torch.cuda.default_stream` has no accelerator equivalent: keep the stream "
    "`torch.accelerator.current_stream()` returns outside any stream context",
}
#: calls that certainly return a stream (so `with torch.cuda.stream(x):` never gets None)
_STREAM_MAKERS = (
    {"torch.Stream", "torch.accelerator.current_stream", "torch.get_device_module"}
    | {f"torch.cuda{sub}.{name}" for sub in ("", ".streams") for name in ("Stream", "ExternalStream")}
    | {"torch.cuda.current_stream", "torch.cuda.default_stream"}
)
#: what any `torch.Stream` does as a CUDA stream does: a current stream used only so keeps its fix safe
_STREAM_METHODS = frozenset({"wait_stream", "wait_event", "record_event", "synchronize", "query"})
_TAKES_A_STREAM = frozenset({"wait_stream", "record_stream"})
#: why a stream fix is unsafe where the stream is kept or passed on (by what the fix writes)
_NOT_THE_CUDA_CLASS = {
    "current_stream": "`torch.accelerator.current_stream()` returns a `torch.Stream`, not a "
    "`torch.cuda.Stream`: check that what takes it needs no more than a stream's own methods",
    "Stream": "`torch.Stream()` makes a `torch.Stream`, not a `torch.cuda.Stream`: check that what takes it "
    "needs no more than a stream's own methods",
}
#: event methods that raise without an accelerator -> the value they stand for there (None: statements only)
_EVENT_METHODS = {"record": None, "wait": None, "synchronize": None, "elapsed_time": 'float("nan")'}
#: the attribute of a CUDA stream that holds its raw `cudaStream_t`
_RAW_HANDLE = "cuda_stream"
# positional parameters of the CUDA constructors that are keyword-only in torch.Stream / torch.Event
_KEYWORDS = {"Stream": ("device", "priority"), "Event": ("enable_timing", "blocking", "interprocess")}


class CudaStreamEvent(QualifiedNameRule):
    """CUDA streams and events.

    What it does
    Flags `torch.cuda.Stream`, `Event`, `stream(...)`, `current_stream`, `set_stream` and `default_stream`,
    called or referenced (`functools.partial(torch.cuda.stream, s)`, `isinstance(s, torch.cuda.Stream)`).

    Why it matters on Trainium
    They exist for CUDA only: on a `neuron` device they fail. `torch.Stream` and `torch.Event` take the
    current accelerator (CUDA, `neuron`, or the CPU's dummy stream), a `torch.Stream` is its own context
    manager, and `torch.accelerator.current_stream()` / `set_stream()` cover the rest (TorchNeuron documents
    `torch.accelerator`; a device module's own `current_stream` is not everywhere: `torch.mps` has none).

    Example
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = x.to(device, non_blocking=True)
    torch.cuda.current_stream().wait_stream(side)

    Use instead
    side = torch.Stream()
    with side:
        y = x.to(device, non_blocking=True)
    torch.accelerator.current_stream().wait_stream(side)

    Fix safety
    Safe for calls: on CUDA each replacement does the same (positional `priority` and event flags become
    keywords, as `torch.Stream` / `torch.Event` require). Without an accelerator the CUDA versions raised,
    except `torch.cuda.stream(None)`; `torch.Stream()` works there (a CPU stream, `with` is a no-op) and
    `torch.Event()` is created but raises on `record()`: where every assignment of a name in the file is a
    CUDA event, the fix also guards that name's `record()`, `wait()` and `synchronize()` statements with
    `torch.accelerator.is_available()` and makes `elapsed_time()` NaN without an accelerator (the timing
    code then runs on a CPU-only machine; on CUDA and `neuron` nothing changes). Events used any other way
    keep the plain constructor fix, and their timing still needs an accelerator.
    `torch.accelerator.current_stream()` and `torch.Stream()` give a `torch.Stream` where
    `torch.cuda.current_stream()` and `torch.cuda.Stream()` gave a `torch.cuda.Stream`, on CUDA too: safe
    where the stream is only used as any stream is (its own `wait_stream`, `wait_event`, `record_event`,
    `synchronize`, `query`; passed to `record_stream` / `wait_stream`; entered with `with`), directly or
    through a name bound once (`side = ...` in its function, `self.side = ...` in its class), unsafe where it
    is returned, kept otherwise or passed on (code may need the CUDA class).
    `with torch.cuda.stream(s):` becomes `with s:` safely only when every assignment of `s` in the file is a
    stream; otherwise the fix is unsafe (the original accepted `None` as "no stream"); a stream is its own
    context manager from torch 2.7, so for an older target the fix is held back. Such a block that keeps
    CUDA-only code (`torch.cuda._sleep(...)`) only runs on CUDA: the context stays CUDA's, and so does the
    code in it (no half-migration). Bare references get an
    unsafe fix (positional arguments, subclasses and `partial` keywords differ), `default_stream` and
    references to `stream` none; nor does `current_stream().cuda_stream`, the raw CUDA stream a CUDA library
    or kernel takes (other devices' streams have no such attribute).
    """

    code = "NM406"
    name = "cuda-stream-event"
    region_noun = "stream context"  # what its findings with a region guard (`settle`)
    message = (
        "CUDA streams and events are CUDA-only: use `torch.Stream` / `torch.Event` / `torch.accelerator`"
    )
    severity = "error"
    fix_safety = "safe"
    triggers = ((b"cuda", b"stream"), (b"cuda", b"Stream"), (b"cuda", b"Event"))
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {
        f"torch.cuda{sub}.{short}": target
        for short, target in _TARGETS.items()
        for sub in ("", ".streams")
        if sub == "" or short in ("Stream", "Event")
    }
    VALID = (
        "import torch\ns = torch.Stream()\nwith s:\n    pass\n",
        "import torch\ne = torch.Event(enable_timing=True)\ncur = torch.accelerator.current_stream()\n",
        "import torch\nwith torch.cpu.stream(None):\n    pass\n",
    )
    INVALID = (
        Invalid(
            "import torch\nside = torch.cuda.Stream(priority=-1)\nwith torch.cuda.stream(side):\n    pass\n"
            "torch.cuda.current_stream().wait_stream(side)\n",
            "import torch\nside = torch.Stream(priority=-1)\nwith side:\n    pass\n"
            "torch.accelerator.current_stream().wait_stream(side)\n",
            count=3,
        ),
        Invalid(
            "from torch.cuda import Event\nstart, end = Event(True), Event(enable_timing=True)\n",
            "import torch\nstart, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)\n",
            count=2,
        ),
        Invalid(
            "import torch.cuda as tc\ndef run(s=None):\n    with tc.stream(s):\n        pass\n",
            "def run(s=None):\n    with s:\n        pass\n",
        ),
        Invalid(
            "import torch\nstart = torch.cuda.Event(enable_timing=True)\nend = torch.cuda.Event(True)\n"
            "start.record()\nrun()\nend.record()\nms = start.elapsed_time(end)\n",
            "import torch\nstart = torch.Event(enable_timing=True)\nend = torch.Event(enable_timing=True)\n"
            "if torch.accelerator.is_available():\n    start.record()\nrun()\n"
            "if torch.accelerator.is_available():\n    end.record()\n"
            'ms = start.elapsed_time(end) if torch.accelerator.is_available() else float("nan")\n',
            count=2,
        ),
        Invalid(
            "import torch\ndone = torch.cuda.Event()\ndone.record()\ndef f(done):\n    done = queue.get()\n"
            "    done.wait()\n",
            "import torch\ndone = torch.Event()\ndone.record()\ndef f(done):\n    done = queue.get()\n"
            "    done.wait()\n",
        ),
        Invalid(
            "import functools, torch\nenter = functools.partial(torch.cuda.stream, s)\n",
        ),
        Invalid(
            "import torch\nok = isinstance(s, torch.cuda.Stream)\n"
            "cur = torch.cuda.current_stream(device=0)\n",
            "import torch\nok = isinstance(s, torch.Stream)\ncur = torch.accelerator.current_stream(0)\n",
            count=2,
        ),
        Invalid(
            "import torch\nkernel.run(args, stream=torch.cuda.current_stream().cuda_stream)\n",
        ),
        Invalid(  # the block keeps CUDA-only code: it only runs on CUDA, context and all
            "import torch\ndef forward(self, x):\n"
            "    with torch.cuda.stream(torch.cuda.current_stream(self.device)):\n"
            "        torch.cuda._sleep(100)\n        return self.net(x)\n",
            count=2,
        ),
    )

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.assigned: dict[str, list[cst.BaseExpression]] = {}
        #: each `torch.cuda.stream(x)` with a fix: its finding, fix, argument and the body of its `with`
        self.stream_contexts: list[
            tuple[PendingFinding, FixSpec, cst.BaseExpression, cst.BaseSuite | None]
        ] = []
        self.events: list[tuple[PendingFinding, FixSpec, cst.Call]] = []
        #: `name = torch.cuda.current_stream()`: its finding, fix, the name and the scope it is used in
        self.kept_streams: list[tuple[PendingFinding, FixSpec, str, cst.CSTNode]] = []
        self.event_method_fixes: dict[str, list[Replacement | None]] = {}

    def visit_Call(self, node: cst.Call) -> None:
        """Remember `name.record()` & co with the guarded rewrite they need if `name` is a CUDA event."""
        func = node.func
        if not (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.attr.value in _EVENT_METHODS
        ):
            return
        spec = guarded_fix(self, node, self.ctx.code(node), "", _EVENT_METHODS[func.attr.value])
        replacement = spec.replacements[0] if spec is not None else None
        if replacement is not None and replacement.text == self.ctx.code(node):
            return  # already under an availability guard
        self.event_method_fixes.setdefault(func.value.value, []).append(replacement)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self.assigned.setdefault(self.ctx.code(target.target), []).append(node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.assigned.setdefault(self.ctx.code(node.target), []).append(node.value)

    def message_for(self, name: str) -> str:
        return _MESSAGES[name.rsplit(".", 1)[-1]]

    def fix_for(self, node: cst.CSTNode, call: cst.Call | None, name: str) -> FixSpec | None:
        short = name.rsplit(".", 1)[-1]
        target = _TARGETS[short]
        if call is None:
            if target is None:
                return None
            return FixSpec(
                f"Replace `{name}` with `{target}`",
                (Replacement(node, target),),
                imports=("torch",),
                safety="unsafe",
            )
        if short == "stream":
            return self._stream_context_fix(call)
        if self._raw_handle(call):
            return None
        if short in _KEYWORDS:
            args = self._keyword_args(call, _KEYWORDS[short], keep_first=short == "Stream")
        else:
            args = call_args(self, call, positional=("device",) if short == "current_stream" else ("stream",))
        if target is None or args is None:
            return None
        generic = short not in _NOT_THE_CUDA_CLASS or self._used_as_any_stream(call)
        return FixSpec(
            f"Replace `{name}` with `{target}`",
            (Replacement(call, f"{target}{args}"),),
            imports=("torch",),
            safety=None if generic else "unsafe",
        )

    def _used_as_any_stream(self, call: cst.Call) -> bool:
        """Whether the stream `call` returns is only used as any stream is, right where it is made."""
        return _as_any_stream(self.ctx, call, self.ctx.ancestor(2), self.ctx.ancestor(3))

    def _kept_as_any_stream(self, name: str, scope: cst.CSTNode) -> bool:
        """Whether `name` (`side`, or `self.side` in a class), bound once to a stream, is only used as any
        stream is in `scope`."""
        if len(self.assigned.get(name, ())) != 1:
            return False
        ctx, stack, ok = self.ctx, [], [True]

        class Uses(cst.CSTVisitor):
            def on_visit(self, node: cst.CSTNode) -> bool:
                parent, grand = (stack[-1] if stack else None), (stack[-2] if len(stack) > 1 else None)
                stack.append(node)
                if (
                    isinstance(node, (cst.Name, cst.Attribute))
                    and dotted(node) == name
                    and not isinstance(parent, cst.AssignTarget)
                    and not (isinstance(parent, cst.Attribute) and parent.attr is node)
                ):
                    ok[0] = ok[0] and _as_any_stream(ctx, node, parent, grand)
                return ok[0]

            def on_leave(self, original_node: cst.CSTNode) -> None:
                stack.pop()

        walk(scope, Uses())
        return ok[0]

    def _kept_in(self, assign: cst.CSTNode | None) -> tuple[str, cst.CSTNode] | None:
        """The name a stream is kept in and the scope its uses are in: `side = ...` in its function,
        `self.side = ...` in its class (a data prefetcher's stream, made in `__init__`, used in `preload`)."""
        if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1):
            return None
        target, stack = assign.targets[0].target, tuple(self.ctx.stack)
        if isinstance(target, cst.Name):
            return target.value, scope_of(stack)
        owner = next((n for n in reversed(stack) if isinstance(n, cst.ClassDef)), None)
        if isinstance(target, cst.Attribute) and dotted(target.value) == "self" and owner is not None:
            return dotted(target), owner
        return None

    def _raw_handle(self, call: cst.Call) -> bool:
        """`torch.cuda.current_stream().cuda_stream`: the raw CUDA stream a CUDA library or kernel takes; the
        device module's streams elsewhere have no such attribute."""
        parent = self.ctx.ancestor(2)  # the call's (the visited node is its function)
        return isinstance(parent, cst.Attribute) and parent.value is call and parent.attr.value == _RAW_HANDLE

    def _keyword_args(self, call: cst.Call, names: tuple[str, ...], keep_first: bool) -> str | None:
        """The arguments with positionals turned into keywords (the first kept positional when
        `keep_first`)."""
        parts = []
        for index, arg in enumerate(call.args):
            value = self.ctx.code(arg.value)
            if (
                arg.star
                or (arg.keyword is not None and arg.keyword.value not in names)
                or index >= len(names)
            ):
                return None
            if arg.keyword is not None:
                parts.append(f"{arg.keyword.value}={value}")
            else:
                parts.append(value if keep_first and index == 0 else f"{names[index]}={value}")
        return f"({', '.join(parts)})"

    def _stream_context_fix(self, call: cst.Call) -> FixSpec | None:
        arg = call.args[0] if len(call.args) == 1 else None
        if arg is None or arg.star or (arg.keyword is not None and arg.keyword.value != "stream"):
            return None
        if isinstance(arg.value, cst.Name) and arg.value.value == "None":
            return None
        return FixSpec(
            "Use the stream itself as the context manager",
            (Replacement(call, self.ctx.code(arg.value)),),
            safety="unsafe",
            relies_on=("with torch.Stream",),
        )

    def on_use(self, node: cst.Name | cst.Attribute, call: cst.Call | None, name: str) -> None:
        super().on_use(node, call, name)
        pending = self.ctx.pending[-1]
        note = _NOT_THE_CUDA_CLASS.get(name.rsplit(".", 1)[-1])
        if note and call is not None and pending.fix is not None and pending.fix.safety == "unsafe":
            pending.notes.append(note)
            kept = self._kept_in(self.ctx.ancestor(2))
            if kept is not None:
                self.kept_streams.append((pending, pending.fix, *kept))
        if call is not None and pending.fix is None and self._raw_handle(call):
            pending.notes.append(
                f"its `.{_RAW_HANDLE}` is a raw CUDA stream for CUDA-only code: port what takes it, or keep "
                "this CUDA's"
            )
        if call is not None and name.endswith(".stream") and pending.fix is not None:
            block = self.ctx.ancestor(3)
            body = block.body if isinstance(block, cst.With) and self.ctx.ancestor(2) in block.items else None
            self.stream_contexts.append((pending, pending.fix, call.args[0].value, body))
        if call is not None and name.endswith(".Event") and pending.fix is not None:
            self.events.append((pending, pending.fix, call))

    def finish(self) -> None:
        """Upgrade `with torch.cuda.stream(x):` fixes to safe where `x` is always a stream, and current
        streams kept in a name used only as any stream is; guard event timing."""
        for pending, fix, argument, body in self.stream_contexts:
            values = (
                [argument]
                if isinstance(argument, cst.Call)
                else self.assigned.get(self.ctx.code(argument), [])
            )
            if values and all(self._makes_stream(v) for v in values):
                pending.fix = replace(fix, safety="safe")
                if body is not None:  # the block runs only on CUDA while the context stays CUDA's
                    pending.region = (argument, body)
        for pending, fix, name, scope in self.kept_streams:
            if self._kept_as_any_stream(name, scope):
                pending.fix = replace(fix, safety="safe")
                pending.notes[:] = [n for n in pending.notes if n not in _NOT_THE_CUDA_CLASS.values()]
        for pending, fix, call in self.events:
            guards = self._event_guards(call)
            if guards:
                pending.fix = replace(
                    fix,
                    title=f"{fix.title}; its timing calls run only with an accelerator",
                    replacements=fix.replacements + guards,
                )

    def _event_guards(self, call: cst.Call) -> tuple[Replacement, ...]:
        """The guarded method calls of the name `call` is assigned to, if that name only ever holds events."""
        names = [name for name, values in self.assigned.items() if any(v is call for v in values)]
        if len(names) != 1 or not names[0].isidentifier():
            return ()
        values = self.assigned[names[0]]
        if not all(
            isinstance(v, cst.Call) and (self.ctx.call_name(v) or "").endswith("cuda.Event") for v in values
        ):
            return ()
        guards = self.event_method_fixes.get(names[0], [])
        return () if None in guards else tuple(guards)

    def _makes_stream(self, value: cst.BaseExpression) -> bool:
        return isinstance(value, cst.Call) and self.ctx.call_name(value) in _STREAM_MAKERS


def _as_any_stream(ctx, node: cst.CSTNode, parent: cst.CSTNode | None, grand: cst.CSTNode | None) -> bool:
    """Whether the stream `node` stands for is used there as any stream is: its own methods
    (`.wait_stream(side)`), handed to a method that takes a stream (`x.record_stream(...)`) or entered
    (`with torch.cuda.stream(...)`, which becomes `with <it>:`)."""
    if isinstance(parent, cst.Attribute) and parent.value is node:
        return parent.attr.value in _STREAM_METHODS and isinstance(grand, cst.Call) and grand.func is parent
    if isinstance(parent, cst.Arg) and isinstance(grand, cst.Call):
        func = grand.func
        if isinstance(func, cst.Attribute) and func.attr.value in _TAKES_A_STREAM:
            return True
        return (ctx.call_name(grand) or "").endswith("cuda.stream")
    return isinstance(parent, cst.WithItem)
