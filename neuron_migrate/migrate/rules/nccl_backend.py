"""NM301: `torch.distributed` set up for NCCL, a CUDA-only backend (`'nccl'`, `Backend.NCCL`, backend maps
such as `'cpu:gloo,cuda:nccl'`)."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.migrate.bindings import key_of
from neuron_migrate.migrate.conditions import any_string, uses
from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.fixes import DEVICE, DEVICE_TYPE
from neuron_migrate.migrate.guards import implies
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.patterns import keyword, positional
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement, Rule

_ON = "torch.accelerator.is_available()"
#: the functions that take a backend, and the position of `backend` among their positional parameters
_BACKEND_POSITION = {
    "torch.distributed.init_process_group": 0,
    "torch.distributed.distributed_c10d.init_process_group": 0,
    "torch.distributed.new_group": 2,
    "torch.distributed.distributed_c10d.new_group": 2,
    "torch.distributed.new_subgroups": 3,
    "torch.distributed.distributed_c10d.new_subgroups": 3,
    "torch.distributed.new_subgroups_by_enumeration": 2,
    "torch.distributed.distributed_c10d.new_subgroups_by_enumeration": 2,
}
_NCCL_CONSTANT = "torch.distributed.Backend.NCCL"
_USES_BACKEND_CALL = uses(_BACKEND_POSITION)
_USES_NCCL_CONSTANT = uses((_NCCL_CONSTANT,))


def _entries(spec: str) -> list[tuple[str, str]] | None:
    """`'cpu:gloo,cuda:nccl'` -> [('cpu', 'gloo'), ('cuda', 'nccl')]; None for a plain backend name."""
    if ":" not in spec:
        return None
    pairs = [entry.split(":", 1) for entry in spec.lower().split(",")]
    return [(device, backend) for device, backend in pairs] if all(len(p) == 2 for p in pairs) else []


class NcclBackend(Rule):
    """`init_process_group('nccl')`, `backend='nccl'` and backend maps such as `'cpu:gloo,cuda:nccl'`.

    What it does
    Flags the backend argument of `torch.distributed.init_process_group`, `new_group`, `new_subgroups` and
    `new_subgroups_by_enumeration` when it is 'nccl', `dist.Backend.NCCL`, or a device map with a
    `cuda:nccl` entry, however `torch.distributed` was imported (also in either branch of `'nccl' if ... else
    'gloo'`).

    Why it matters on Trainium
    NCCL drives NVIDIA GPUs only: on a Trainium instance the process group fails to start. TorchNeuron
    registers its own backend for the `neuron` device, which `get_default_backend_for_device` returns.

    Example
    dist.init_process_group(backend="nccl")

    Use instead
    device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")
    dist.init_process_group(backend=dist.get_default_backend_for_device(device))

    Fix safety
    Safe: on CUDA the backend is 'nccl' exactly as before (an explicit backend rather than `backend=None`,
    which would pick differently across torch versions); without an accelerator it is 'gloo', where NCCL
    failed. A map keeps its other entries and swaps `cuda:nccl` for the current accelerator's entry when
    there is one. On an accelerator with no registered backend this raises ValueError, as NCCL failed there.
    """

    code = "NM301"
    name = "nccl-backend"
    message = "NCCL exists only on CUDA: pick the device's backend with `get_default_backend_for_device`"
    severity = "error"
    fix_safety = "safe"
    triggers = (b"nccl", b"NCCL")
    VALID = (
        "import torch.distributed as dist\ndist.init_process_group(backend='gloo')\n",
        "import torch.distributed as dist\ndist.init_process_group()\n",
        "import torch.distributed as dist\nlog.info('using nccl')\n"
        "dist.init_process_group(backend=backend)\n",
        "import mylib\nmylib.init_process_group('nccl')\n",
    )
    INVALID = (
        Invalid(
            "import torch.distributed as dist\ndist.init_process_group(backend='nccl')\n",
            "import torch\nimport torch.distributed as dist\n"
            'device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")\n'
            "dist.init_process_group(backend=dist.get_default_backend_for_device(device))\n",
        ),
        Invalid(
            "import torch\ntorch.distributed.init_process_group('NCCL', init_method='env://')\n",
            "import torch\ndevice = torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")\n'
            "torch.distributed.init_process_group(torch.distributed.get_default_backend_for_device(device), init_method='env://')\n",
        ),
        Invalid(
            "from torch.distributed import init_process_group\ninit_process_group('cpu:gloo,cuda:nccl')\n",
            "import torch\nfrom torch.distributed import init_process_group\n"
            'device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")\n'
            "init_process_group(\n   "
            " f'cpu:gloo,{device.type}:{torch.distributed.get_default_backend_for_device(device)}'\n"
            "    if torch.accelerator.is_available()\n    else 'cpu:gloo'\n)\n",
        ),
        Invalid(
            "import torch\nimport torch.distributed as dist\n"
            "dist.init_process_group('nccl' if torch.cuda.is_available() else 'gloo')\n"
            "group = dist.new_group([0, 1], None, dist.Backend.NCCL)\n",
            "import torch\nimport torch.distributed as dist\n"
            'device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")\n'
            "dist.init_process_group(dist.get_default_backend_for_device(device))\n"
            "group = dist.new_group([0, 1], None, dist.get_default_backend_for_device(device))\n",
            count=2,
        ),
        Invalid(
            "import argparse\nimport torch.distributed as dist\np = argparse.ArgumentParser()\n"
            "p.add_argument('--dist-backend', default='nccl')\nargs = p.parse_args()\n"
            "dist.init_process_group(backend=args.dist_backend)\nbackend = 'nccl'\n"
            "dist.new_group([0, 1], backend=backend)\n",
            "import argparse\nimport torch\nimport torch.distributed as dist\np = argparse.ArgumentParser()\n"
            'device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")\n'
            "p.add_argument('--dist-backend', default=dist.get_default_backend_for_device(device))\n"
            "args = p.parse_args()\ndist.init_process_group(backend=args.dist_backend)\n"
            "backend = dist.get_default_backend_for_device(device)\n"
            "dist.new_group([0, 1], backend=backend)\n",
            count=2,
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """A call that takes a backend, and NCCL: `Backend.NCCL` or a string that names it."""
        return _USES_BACKEND_CALL(lex) and (
            _USES_NCCL_CONSTANT(lex) or any_string(lex, lambda s: "nccl" in s.lower())
        )

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.literals: dict[int, list[cst.CSTNode]] = {}  # id(backend string) -> its stack, for names below

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if "nccl" in (string_value(node) or "").lower():
            self.literals[id(node)] = list(self.ctx.stack)

    def visit_Call(self, node: cst.Call) -> None:
        position = _BACKEND_POSITION.get(self.ctx.call_name(node) or "")
        if position is None:
            return
        arg = keyword(node, "backend") or positional(node, position)
        if arg is None:
            return
        value, prefix = arg.value, self._prefix(node)
        if isinstance(value, cst.IfExp) and self._collapsible(value):
            self.report(
                node,
                fix=FixSpec(
                    "Use the current device's default backend (gloo without an accelerator)",
                    (Replacement(value, self._default(prefix)),),
                    imports=("torch",),
                ),
            )
            return
        for candidate in (value.body, value.orelse) if isinstance(value, cst.IfExp) else (value,):
            new = self._replacement(candidate, prefix)
            if new is not None:
                self.report(
                    node,
                    fix=FixSpec(
                        "Use the current device's default backend",
                        (Replacement(candidate, new),),
                        imports=("torch",),
                        needs_name="{" in new,
                    ),
                )
            elif (
                isinstance(candidate, (cst.Name, cst.Attribute))
                and self.ctx.qualified_name(candidate) != _NCCL_CONSTANT
            ):
                key = key_of(candidate)  # bound now: the deferred check runs after the walk
                self.ctx.defer(lambda key=key: self._through_name(key, prefix))

    def _through_name(self, key: str | None, prefix: str) -> None:
        """`backend = "nccl"` (or `--dist-backend` defaulting to it, or a conditional over such names) later
        passed as the backend: each NCCL string it can hold is rewritten where it is written."""
        for literal in self._literals_of(key, set()):
            new = self._replacement(literal, prefix)
            if new is None:
                continue
            saved, self.ctx.stack = self.ctx.stack, self.literals[id(literal)]  # report where the string is
            self.report(
                literal,
                f"{self.message} (`{key}` is passed as the process group's backend)",
                FixSpec(
                    "Use the current device's default backend",
                    (Replacement(literal, new),),
                    imports=("torch",),
                    needs_name="{" in new,
                ),
            )
            self.ctx.stack = saved

    def _literals_of(self, key: str | None, seen: set[str]) -> list[cst.BaseExpression]:
        """The NCCL strings a name can hold, through further names and both branches of conditionals."""
        if key is None or key in seen or len(seen) > 4:
            return []
        seen.add(key)
        found: list[cst.BaseExpression] = []
        pending = [b.value for b in self.ctx.bindings.of(key)]
        while pending:
            value = pending.pop()
            if isinstance(value, cst.IfExp):
                pending += [value.body, value.orelse]
            elif id(value) in self.literals:
                found.append(value)
            elif isinstance(value, (cst.Name, cst.Attribute)):
                found += self._literals_of(key_of(value), seen)
        return found

    def _collapsible(self, value: cst.IfExp) -> bool:
        """`'nccl' if torch.cuda.is_available() else 'gloo'`: the default backend already gives gloo on
        CPU."""
        branches = {(string_value(value.body) or "").lower(), (string_value(value.orelse) or "").lower()}
        available = implies(self.ctx, value.test)
        nccl_when_available = (string_value(value.body) or "").lower() == "nccl"
        expected = ("certain", "absent") if nccl_when_available else ("absent", "certain")
        return branches == {"nccl", "gloo"} and available == expected

    def _default(self, prefix: str) -> str:
        return f"{prefix}.get_default_backend_for_device({DEVICE})"

    def _prefix(self, call: cst.Call) -> str:
        """How this file spells `torch.distributed` in the call (`dist`), so the fix reads like the code."""
        func = call.func
        if isinstance(func, cst.Attribute) and self.ctx.qualified_name(func.value) == "torch.distributed":
            return self.ctx.code(func.value)
        return "torch.distributed"

    def _replacement(self, node: cst.BaseExpression | None, prefix: str) -> str | None:
        if node is None:
            return None
        default = self._default(prefix)
        if self.ctx.qualified_name(node) == _NCCL_CONSTANT:
            return default
        spec = string_value(node)
        if spec is None:
            return None
        entries = _entries(spec)
        if entries is None:
            return default if spec.lower() == "nccl" else None
        if ("cuda", "nccl") not in entries:
            return None
        others = [f"{d}:{b}" for d, b in entries if d != "cuda"]
        if not others:
            return default
        with_accelerator = ",".join(
            f"{{{DEVICE_TYPE}}}:{{{default}}}" if d == "cuda" else f"{d}:{b}" for d, b in entries
        )
        return f"f'{with_accelerator}' if {_ON} else '{','.join(others)}'"
