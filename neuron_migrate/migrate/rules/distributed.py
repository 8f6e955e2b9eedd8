"""NM301–NM304: `torch.distributed` set up for CUDA only (NCCL, device ids, `torch.cuda.nccl`, backend
maps)."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.bindings import key_of
from neuron_migrate.migrate.conditions import any_string, uses
from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.fixes import DEVICE, DEVICE_EXPR, DEVICE_TYPE, DEVICE_TYPE_EXPR
from neuron_migrate.migrate.guards import accelerator_certain, implies
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.patterns import QualifiedNameRule, indentation, keyword, positional, spells_names
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement, Rule

_DEV = DEVICE_EXPR
_TYPE = DEVICE_TYPE_EXPR
_ON = "torch.accelerator.is_available()"
#: the functions that take a backend, and the position of `backend` among their positional parameters
_BACKEND_POSITION = {
    "torch.distributed.init_process_group": 0,
    "torch.distributed.distributed_c10d.init_process_group": 0,
    "torch.distributed.new_group": 2,
    "torch.distributed.distributed_c10d.new_group": 2,
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
    Flags the backend argument of `torch.distributed.init_process_group` and `new_group` when it is 'nccl',
    `dist.Backend.NCCL`, or a device map with a `cuda:nccl` entry, however `torch.distributed` was imported
    (also in either branch of `'nccl' if ... else 'gloo'`).

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


class DdpDeviceIds(Rule):
    """`DistributedDataParallel(model, device_ids=[local_rank], output_device=local_rank)`.

    What it does
    Flags `DistributedDataParallel` calls that pass a non-empty `device_ids` list or an `output_device`,
    unless the call already sits under an accelerator-availability check.

    Why it matters on Trainium
    `device_ids` names the one device a single-device accelerator module lives on; DDP moves the inputs
    there. For a CPU module DDP rejects any `device_ids`/`output_device` (ValueError). On `neuron` the ids
    are NeuronCore indices: whether `local_rank` is the right index depends on how many cores each process
    sees (`NEURON_RT_VISIBLE_CORES`).

    Example
    model = DistributedDataParallel(model, device_ids=[local_rank], output_device=local_rank)

    Use instead
    model = DistributedDataParallel(
        model,
        device_ids=[local_rank] if torch.accelerator.is_available() else None,
        output_device=local_rank if torch.accelerator.is_available() else None,
    )

    Fix safety
    Unsafe: the ids are kept where there is an accelerator and dropped (None) without one, which is the
    same on CUDA and lets the CPU fallback run. Check that the index is right for the NeuronCores each
    process sees, or pass `device_ids=None` and move the inputs to the device yourself.
    """

    code = "NM302"
    name = "ddp-device-ids"
    message = (
        "`device_ids`/`output_device` name CUDA devices and fail for CPU modules: pass them only when an "
        "accelerator is present"
    )
    severity = "warning"
    fix_safety = "unsafe"
    triggers = (b"DistributedDataParallel",)
    NAMES: ClassVar[set[str]] = {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
    }
    VALID = (
        "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(model)\n",
        "import torch\nmodel = torch.nn.parallel.DistributedDataParallel(model, device_ids=None)\n",
        (
            "import torch\nif torch.accelerator.is_available():\n"
            "    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])\n"
        ),
        "import torch\nmodel = torch.nn.DataParallel(model, device_ids=[0, 1])\n",
    )
    INVALID = (
        Invalid(
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "model = DDP(model, device_ids=[local_rank], output_device=local_rank)\n",
            "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(\n"
            "    model,\n    device_ids=[local_rank] if torch.accelerator.is_available() else None,\n"
            "    output_device=local_rank if torch.accelerator.is_available() else None,\n)\n",
        ),
        Invalid(
            "import torch.nn as nn\nmodel = nn.parallel.DistributedDataParallel(model, [args.gpu])\n",
            "import torch\nimport torch.nn as nn\n"
            "model = nn.parallel.DistributedDataParallel(model, [args.gpu] if"
            " torch.accelerator.is_available() else None)\n",
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """A use of `DistributedDataParallel`: every finding is a call of one of NAMES."""
        return spells_names(cls, lex)

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.call_name(node) not in self.NAMES or accelerator_certain(self.ctx):
            return
        device_ids = keyword(node, "device_ids") or positional(node, 1)
        output_device = keyword(node, "output_device") or positional(node, 2)
        flagged = []
        if (
            device_ids is not None
            and isinstance(device_ids.value, (cst.List, cst.Tuple))
            and device_ids.value.elements
        ):
            flagged.append(device_ids.value)
        if (
            output_device is not None
            and not isinstance(output_device.value, cst.IfExp)
            and not (isinstance(output_device.value, cst.Name) and output_device.value.value == "None")
        ):
            flagged.append(output_device.value)
        if flagged:
            edits = tuple(Replacement(v, f"{self.ctx.code(v)} if {_ON} else None") for v in flagged)
            self.report(
                node,
                fix=FixSpec(
                    "Pass the device ids only when an accelerator is present", edits, imports=("torch",)
                ),
            )


class CudaNcclModule(QualifiedNameRule):
    """`torch.cuda.nccl`: PyTorch's direct bindings to NCCL.

    What it does
    Flags every use of `torch.cuda.nccl` and its functions (`all_reduce`, `broadcast`, `version`, ...).

    Why it matters on Trainium
    These call NCCL on CUDA tensors directly; there is no NCCL and no CUDA tensor on a Trainium instance.
    `torch.distributed` collectives run on whichever backend the process group uses, including TorchNeuron's.

    Example
    torch.cuda.nccl.all_reduce(tensors)

    Use instead
    torch.distributed.all_reduce(tensor)

    Fix safety
    No automatic fix: the calling conventions differ (a list of per-GPU tensors in one process versus one
    tensor per rank). A `torch.cuda.nccl.version()` check is a CUDA capability gate: keep it on the CUDA path.
    """

    code = "NM303"
    name = "cuda-nccl-module"
    message = "`{name}` calls NCCL directly and is CUDA-only: use `torch.distributed` collectives"
    severity = "error"
    triggers = (b"nccl",)
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {"torch.cuda.nccl": None, "torch.cuda.nccl.*": None}
    VALID = ("import torch.distributed as dist\ndist.all_reduce(t)\n", "import torch\nbackend = 'nccl'\n")
    INVALID = (
        Invalid(
            "import torch\ntorch.cuda.nccl.all_reduce(tensors)\n",
        ),
        Invalid(
            "from torch.cuda import nccl\nif nccl.version() >= (2, 18):\n    nccl.broadcast(ts)\n",
            count=2,
        ),
    )


class CudaBackendMap(Rule):
    """A dict that maps device types to distributed backends with a 'cuda' key (`{'cuda': 'nccl'}`).

    What it does
    Flags dict displays with a `'cuda'` key whose value is a backend name (nccl, gloo, mpi, ucc) and no
    entry for the current accelerator (a `'neuron'` key is one).

    Why it matters on Trainium
    Code looks the backend up by device type (`BACKENDS[device.type]`): with a `neuron` device that is a
    KeyError.

    Example
    BACKENDS = {"cpu": "gloo", "cuda": "nccl"}

    Use instead
    BACKENDS = {device.type: dist.Backend.default_device_backend_map.get(device.type), "cpu": "gloo",
                "cuda": "nccl"}

    Fix safety
    Safe: the new entry comes first, so every existing key keeps its value (on CUDA and on a CPU-only
    machine the dict is unchanged); the accelerator's entry is the backend torch registered for it, or None
    for a device without one (no error while building the dict).
    """

    code = "NM304"
    name = "cuda-backend-map"
    message = "backend map keyed by 'cuda' misses the current accelerator: add an entry for its device type"
    severity = "warning"
    fix_safety = "safe"
    # the backend names as they appear in the dict's values ("ucc"/"mpi" only quoted: they hide in words)
    triggers = (b"nccl", b"NCCL", b"gloo", b"'mpi'", b'"mpi"', b"'ucc'", b'"ucc"')
    BACKENDS: ClassVar[set[str]] = {"nccl", "gloo", "mpi", "ucc"}
    VALUE = f"torch.distributed.Backend.default_device_backend_map.get({DEVICE_TYPE})"
    VALID = (
        "RUN_META = {'accelerator': 'cuda', 'precision': 'fp16'}\n",
        "names = {'cuda': 'NVIDIA GPU', 'cpu': 'host'}\n",
        "import torch\nbackends = {'cpu': 'gloo'}\n",
        "BACKENDS = {'cuda': 'nccl', 'cpu': 'gloo', 'neuron': 'neuron'}\n",
    )
    INVALID = (
        Invalid(
            "BACKENDS = {'cpu': 'gloo', 'cuda': 'nccl'}\n",
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\nBACKENDS = {\n    device_type:'
            " torch.distributed.Backend.default_device_backend_map.get(device_type), 'cpu':"
            " 'gloo', 'cuda': 'nccl'\n}\n",
        ),
        Invalid(
            "import torch\nBACKENDS = {\n    'cuda': 'NCCL',\n    **EXTRA,\n}\n",
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\nBACKENDS = {\n    device_type:'
            " torch.distributed.Backend.default_device_backend_map.get(device_type),\n    'cuda': 'NCCL',\n"
            "    **EXTRA,\n}\n",
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """The string 'cuda' (a key) and a backend name (a value)."""
        return "cuda" in lex.strings and any_string(lex, lambda s: s.lower() in cls.BACKENDS)

    def visit_Dict(self, node: cst.Dict) -> None:
        keyed = [e for e in node.elements if isinstance(e, cst.DictElement)]
        cuda = [
            e
            for e in keyed
            if string_value(e.key) == "cuda" and (string_value(e.value) or "").lower() in self.BACKENDS
        ]
        if not cuda or any(
            (string_value(e.key) is None and _names_device(self.ctx.code(e.key)))
            or string_value(e.key) == "neuron"
            for e in keyed
        ):
            return  # a computed key for the current device, or one for `neuron`, is there already
        first = node.elements[0]
        if not isinstance(first, cst.DictElement):
            self.report(cuda[0])
            return
        whitespace = node.lbrace.whitespace_after
        separator = " "
        if isinstance(whitespace, cst.ParenthesizedWhitespace):
            separator = "\n" + indentation(self.ctx) + whitespace.last_line.value
        entry = f"{DEVICE_TYPE}: {self.VALUE},{separator}{self.ctx.code(first.key)}"
        self.report(
            cuda[0],
            fix=FixSpec(
                "Add an entry for the current accelerator",
                (Replacement(first.key, entry),),
                imports=("torch",),
            ),
        )


def _names_device(code: str) -> bool:
    return "accelerator" in code or "device" in code
