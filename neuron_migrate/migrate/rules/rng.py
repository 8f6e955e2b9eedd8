"""NM404 / NM405: seeding and saving the CUDA random number generators."""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.guards import accelerator_certain
from neuron_migrate.migrate.names import dotted
from neuron_migrate.migrate.patterns import (
    QualifiedNameRule,
    call_args,
    guarded_fix,
    indentation,
    is_expression_statement,
    keyword,
    positional,
)
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement
from neuron_migrate.migrate.walk import find

#: the current accelerator's device module (`torch.cuda`, `torch.neuron`); `torch.cpu` without one
_DEVICE_MODULE = "torch.get_device_module()"


_FORK_RNG = "torch.random.fork_rng"
_LISTED_FORK = (
    "the module forks the generators with `{fork}`, which forks only the devices it lists: list the "
    "accelerator's there and change them together"
)


def _with_random_spelling(names: dict) -> dict:
    """Each `torch.cuda.X` also as `torch.cuda.random.X`, where the functions are defined."""
    return {**names, **{n.replace("torch.cuda.", "torch.cuda.random.", 1): v for n, v in names.items()}}


class CudaManualSeed(QualifiedNameRule):
    """`torch.cuda.manual_seed(s)` / `torch.cuda.manual_seed_all(s)`.

    What it does
    Flags calls of and references to `torch.cuda.manual_seed` and `torch.cuda.manual_seed_all`.

    Why it matters on Trainium
    They seed the CUDA generators only: on a `neuron` device the run is not reproducible. `torch.manual_seed`
    seeds the CPU and every accelerator's generators, `neuron` included.

    Example
    torch.cuda.manual_seed_all(seed)

    Use instead
    torch.manual_seed(seed)  # seeds the CPU and every accelerator; or, for the accelerator alone:
    torch.get_device_module().manual_seed_all(seed)

    Fix safety
    Safe. When the same block also calls `torch.manual_seed` with the same seed, before or after it, and only
    other seeding statements sit in between (the usual "seed everything" function), that call seeds CUDA and
    every other accelerator, and the CUDA call does nothing off CUDA: it is code that works everywhere, so it
    stays (a note; deleting it would be a clean-up, not a migration). Otherwise it becomes the accelerator's
    own seeding function, `torch.get_device_module().manual_seed(_all)(seed)`, run only when there is an
    accelerator (as the CUDA call did nothing without CUDA): the same call on CUDA, and it leaves the CPU
    generator alone, where `torch.manual_seed` would reseed it and change every CPU random number drawn
    afterwards.
    """

    code = "NM404"
    name = "cuda-manual-seed"
    message = (
        "`{short}` seeds CUDA only: seed the current accelerator (`torch.manual_seed` seeds every device)"
    )
    severity = "warning"
    fix_safety = "safe"
    triggers = ((b"cuda", b"manual_seed"),)
    names_only = True
    NAMES = _with_random_spelling(
        {
            "torch.cuda.manual_seed": "torch.manual_seed",
            "torch.cuda.manual_seed_all": "torch.manual_seed",
        }
    )
    VALID = (
        "import torch\ntorch.manual_seed(0)\n",
        "import torch\ntorch.mps.manual_seed(0)\n",
        "import random\nrandom.seed(0)\n",
    )
    INVALID = (
        Invalid(  # already seeded by `torch.manual_seed(s)`: a note, no change
            "import random, torch\ndef seed_all(s):\n    torch.manual_seed(s)\n    random.seed(s)\n"
            "    if torch.cuda.is_available():\n        torch.cuda.manual_seed_all(s)\n",
        ),
        Invalid(
            "from torch.cuda import manual_seed\nmanual_seed(1234)\n",
            "import torch\nif torch.accelerator.is_available():\n"
            "    torch.get_device_module().manual_seed(1234)\n",
        ),
        Invalid(
            "import torch\ntorch.manual_seed(0)\nx = torch.rand(3)\ntorch.cuda.manual_seed(0)\n",
            "import torch\ntorch.manual_seed(0)\nx = torch.rand(3)\nif torch.accelerator.is_available():\n"
            "    torch.get_device_module().manual_seed(0)\n",
        ),
        Invalid(
            "import torch\nseeders = [torch.cuda.manual_seed_all]\n",
        ),
    )

    def on_use(self, node: cst.Name | cst.Attribute, call: cst.Call | None, name: str) -> None:
        if (where := self._redundant(call)) is not None:
            self.report(call, self.message_for(name), no_change=_REDUNDANT.format(where=where))
            return
        super().on_use(node, call, name)

    def fix_for(self, node: cst.CSTNode, call: cst.Call | None, name: str) -> FixSpec | None:
        seed = _only_argument(call, "seed") if call is not None else None
        if seed is None:
            return None
        function = name.rsplit(".", 1)[-1]
        return guarded_fix(
            self,
            call,
            f"{_DEVICE_MODULE}.{function}({self.ctx.code(seed.value)})",
            f"Seed the accelerator's generator (`{function}` of its device module)",
            cpu_value="None",
        )

    def _redundant(self, call: cst.Call | None) -> str | None:
        """Where the `torch.manual_seed` with the same seed is ("before", "after") when `call` is a statement
        next to it, with only seeding statements between: that call seeds CUDA too, either way round."""
        seed = _only_argument(call, "seed") if call is not None else None
        if seed is None or is_expression_statement(self.ctx, call) is None:
            return None
        seed_code = self.ctx.code(seed.value)
        return next((where for where in ("before", "after") if self._seeded(seed_code, where)), None)

    def _seeded(self, seed_code: str, where: str) -> bool:
        """Whether `torch.manual_seed(<same seed>)` runs just `where` ("before", "after") the visited call,
        with only seeding statements between."""
        stack = self.ctx.stack
        for child, parent in zip(reversed(stack), reversed(stack[:-1]), strict=False):
            if isinstance(parent, (cst.IndentedBlock, cst.Module)):
                index = parent.body.index(child)
                beside = reversed(parent.body[:index]) if where == "before" else parent.body[index + 1 :]
                for stmt in beside:
                    if self._is_manual_seed(stmt, seed_code):
                        return True
                    if not _is_seeding(stmt):
                        return False
            elif (isinstance(parent, cst.If) and child in (parent.body, parent.orelse)) or isinstance(
                parent, cst.Else
            ):
                # `if torch.cuda.is_available():` draws no random numbers: look beside the `if` (from its
                # `elif` or `else` too: diffusers' `if is_torch_npu_available(): ... else:` seeds CUDA there)
                continue
            elif not isinstance(parent, (cst.SimpleStatementLine, cst.Expr, cst.Call, cst.IndentedBlock)):
                return False
        return False

    def _is_manual_seed(self, stmt: cst.CSTNode, seed_code: str) -> bool:
        for call in _statement_calls(stmt):
            if self.ctx.call_name(call) in ("torch.manual_seed", "torch.random.manual_seed"):
                seed = _only_argument(call, "seed")
                return seed is not None and self.ctx.code(seed.value) == seed_code
        return False


_REDUNDANT = (
    "`torch.manual_seed` just {where} it already seeds every device, `neuron` included, and this call does "
    "nothing off CUDA: no change needed"
)


def _only_argument(call: cst.Call, name: str) -> cst.Arg | None:
    if len(call.args) != 1:
        return None
    return positional(call, 0) or keyword(call, name)


def _statement_calls(stmt: cst.CSTNode) -> list[cst.Call]:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return []
    return [s.value for s in stmt.body if isinstance(s, cst.Expr) and isinstance(s.value, cst.Call)]


def _is_seeding(stmt: cst.CSTNode) -> bool:
    """A line that only seeds generators or sets determinism flags (`random.seed(s)`,
    `os.environ[...] = …`)."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            callee = (dotted(small.value.func) or "").rsplit(".", 1)[-1]
            if "seed" not in callee and "deterministic" not in callee:
                return False
        elif isinstance(small, cst.Assign):
            targets = [cst.Module([]).code_for_node(t.target) for t in small.targets]
            if not all("environ" in t or "backends." in t or "seed" in t for t in targets):
                return False
        else:
            return False
    return True


class CudaRngState(QualifiedNameRule):
    """Saving and restoring CUDA generator states: `torch.cuda.get_rng_state(_all)` / `set_rng_state(_all)`.

    What it does
    Flags `torch.cuda.get_rng_state`, `get_rng_state_all`, `set_rng_state` and `set_rng_state_all`.

    Why it matters on Trainium
    They save and restore the CUDA generators only: a checkpoint taken on a `neuron` device would not
    capture its random state. There is no `torch.accelerator` RNG API; the accelerator's device module
    (`torch.get_device_module(device)`: `torch.cuda`, `torch.neuron`) has `get_rng_state(device)` and
    `set_rng_state(state, device)`. `torch.cpu` has neither.

    Example
    state = {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all()}

    Use instead
    state = {"cpu": torch.get_rng_state(), "cuda": [
        torch.get_device_module(device).get_rng_state(i) for i in range(torch.accelerator.device_count())]}

    Fix safety
    Safe: each rewrite does what the CUDA call did on CUDA and without CUDA. `get_rng_state_all()` becomes
    a per-device list, empty without an accelerator as before (device modules other than CUDA's lack the
    `_all` functions). `set_rng_state` and `set_rng_state_all` did nothing without CUDA, so they are guarded
    with `torch.accelerator.is_available()`. `get_rng_state()` raised without CUDA and still does. A
    `torch.random.fork_rng()` around them needs no `device_type=`: torch 2.13 forks the current
    accelerator's generators by default (CUDA's without one). In a module whose fork lists its devices
    (`fork_rng(gpu_devices)`), the states are left for a person to change with that list. States that a
    checkpoint carries (in a function that calls `torch.save` / `torch.load`, or named `state_dict`,
    `set_states`, ...) get an unsafe fix: saved on one accelerator type and restored on another, CUDA
    among them, a state goes into the wrong generator and fails, where the CUDA calls saved nothing off CUDA.
    """

    code = "NM405"
    generator_state = True
    name = "cuda-rng-state"
    message = "`{short}` covers CUDA only: use the accelerator's device module (`torch.get_device_module`)"
    severity = "warning"
    fix_safety = "safe"
    triggers = ((b"cuda", b"rng_state"),)
    names_only = True
    NAMES = _with_random_spelling(
        {
            "torch.cuda.get_rng_state": f"{_DEVICE_MODULE}.get_rng_state",
            "torch.cuda.set_rng_state": f"{_DEVICE_MODULE}.set_rng_state",
            "torch.cuda.get_rng_state_all": None,
            "torch.cuda.set_rng_state_all": None,
        }
    )
    VALID = (
        "import torch\nstate = torch.get_rng_state()\n",
        "import torch\ntorch.set_rng_state(state)\n",
        f"import torch\ns = {_DEVICE_MODULE}.get_rng_state()\n",
    )
    INVALID = (
        Invalid(
            "import torch\nstate = {'cpu': torch.get_rng_state(), 'cuda': torch.cuda.get_rng_state_all()}\n",
            "import torch\nstate = {\n    'cpu': torch.get_rng_state(),\n"
            "    'cuda': [torch.get_device_module().get_rng_state(i) for i in"
            " range(torch.accelerator.device_count())],\n}\n",
        ),
        Invalid(
            "import torch\ndef load(state):\n    torch.cuda.set_rng_state_all(state['cuda'])\n",
            "import torch\ndef load(state):\n    if torch.accelerator.is_available():\n"
            "        for device_index, rng_state in enumerate(state['cuda']):\n"
            "            torch.get_device_module().set_rng_state(rng_state, device_index)\n",
        ),
        Invalid(
            "import torch.cuda\nif torch.cuda.is_available():\n    saved = torch.cuda.get_rng_state()\n"
            "    torch.cuda.set_rng_state(saved)\n",
            "import torch.cuda\nif torch.cuda.is_available():\n"
            "    saved = torch.get_device_module().get_rng_state()\n"
            "    torch.get_device_module().set_rng_state(saved)\n",
            count=2,
        ),
        Invalid(  # `"cuda"`, the current device, is the default: `torch.neuron` must not be told CUDA
            "import torch\nif torch.cuda.is_available():\n    s = torch.cuda.get_rng_state('cuda')\n"
            "    torch.cuda.set_rng_state(s, device='cuda:0')\n",
            "import torch\nif torch.cuda.is_available():\n    s = torch.get_device_module().get_rng_state()\n"
            "    torch.get_device_module().set_rng_state(s, device=0)\n",
            count=2,
        ),
        Invalid(
            "from torch.cuda.random import set_rng_state\nset_rng_state(s)\n",
            "import torch\nif torch.accelerator.is_available():\n"
            "    torch.get_device_module().set_rng_state(s)\n",
        ),
    )

    def on_use(self, node: cst.Name | cst.Attribute, call: cst.Call | None, name: str) -> None:
        fork = self._listed_fork()
        if fork is None:
            super().on_use(node, call, name)
            return
        self.report(call or node, f"{self.message_for(name)} ({_LISTED_FORK.format(fork=fork)})")

    def _listed_fork(self) -> str | None:
        """A `torch.random.fork_rng(devices, ...)` call of the module that lists its devices, as text, or
        None. It forks only those: a state the module saves and restores around it must be of a listed
        device, so the list and the states change together (fairscale's pipe checkpointing lists
        `gpu_devices`, filled under `if device.type == "cuda":`). Without a list, torch 2.13 forks every
        device of the current accelerator (CUDA's without one)."""
        if not hasattr(self, "_fork"):
            self._fork = next(
                (
                    self.ctx.code(call)
                    for call in find(self.ctx.module, cst.Call)
                    if self.ctx.call_name(call) == _FORK_RNG and _devices_argument(call) is not None
                ),
                None,
            )
        return self._fork

    def fix_for(self, node: cst.CSTNode, call: cst.Call | None, name: str) -> FixSpec | None:
        short = name.rsplit(".", 1)[-1]
        if call is None:
            return None
        title = f"Replace `{name}` with the device module's `{short.removesuffix('_all')}`"
        args = self._args_without_cuda_device(call, short)
        if args is None:
            return None
        if short == "get_rng_state":
            return FixSpec(
                title, (Replacement(call, f"{_DEVICE_MODULE}.get_rng_state{args}"),), imports=("torch",)
            )
        if short == "set_rng_state":
            return guarded_fix(self, call, f"{_DEVICE_MODULE}.set_rng_state{args}", title, cpu_value="None")
        if short == "get_rng_state_all" and not call.args:
            text = f"[{_DEVICE_MODULE}.get_rng_state(i) for i in range(torch.accelerator.device_count())]"
            return FixSpec(title, (Replacement(call, text),), imports=("torch",))
        if short == "set_rng_state_all":
            return self._set_all_fix(call, title)
        return None

    def _args_without_cuda_device(self, call: cst.Call, short: str) -> str | None:
        """The call's arguments for the device module's function. A CUDA device string (nanotron's
        `torch.cuda.get_rng_state("cuda")`) would name CUDA to `torch.neuron`: `"cuda"`, the current device,
        is dropped (the default), `"cuda:1"` becomes its index; None for another device literal."""
        at = {"get_rng_state": 0, "set_rng_state": 1}.get(short)
        device = None if at is None else positional(call, at) or keyword(call, "device")
        literal = string_value(device.value) if device is not None else None
        if literal is None:
            return call_args(self, call)
        matched = re.fullmatch(r"cuda(?::(\d+))?", literal)
        if matched is None:
            return None
        texts = [
            (f"{a.keyword.value}=" if a.keyword is not None else "") + self.ctx.code(a.value)
            for a in call.args
            if a is not device
        ]
        if matched.group(1) is not None:
            texts.append(("device=" if device.keyword is not None else "") + matched.group(1))
        return f"({', '.join(texts)})"

    def _set_all_fix(self, call: cst.Call, title: str) -> FixSpec | None:
        states = _only_argument(call, "new_states")
        if states is None or is_expression_statement(self.ctx, call) is None:
            return None
        index, state = (_fresh_name(self.ctx.source, n) for n in ("device_index", "rng_state"))
        step = self.ctx.module.default_indent
        indent = indentation(self.ctx)
        head = f"for {index}, {state} in enumerate({self.ctx.code(states.value)}):"
        body = f"{_DEVICE_MODULE}.set_rng_state({state}, {index})"
        if accelerator_certain(self.ctx):
            text = f"{head}\n{indent}{step}{body}"
        else:
            text = f"if torch.accelerator.is_available():\n{indent}{step}{head}\n{indent}{step}{step}{body}"
        return FixSpec(title, (Replacement(call, text),), imports=("torch",))


def _fresh_name(code: str, name: str) -> str:
    """`name`, or `name_2`, … — whichever the file does not use yet (the loop must not rebind user names)."""
    candidate, number = name, 1
    while re.search(rf"\b{candidate}\b", code):
        number += 1
        candidate = f"{name}_{number}"
    return candidate


def _devices_argument(call: cst.Call) -> cst.Arg | None:
    """The `devices` argument of a `fork_rng` call (its first parameter), unless it is `None`."""
    arg = positional(call, 0) or keyword(call, "devices")
    return None if arg is None or (isinstance(arg.value, cst.Name) and arg.value.value == "None") else arg
