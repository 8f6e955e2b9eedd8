"""NM601–NM603: CUDA and NCCL environment variables, and `nvidia-smi` run as a program.

A variable name counts only where it is used as one: the key of `os.environ[...]`, `os.environ.get/pop/
setdefault/update`, `os.getenv/putenv/unsetenv`, `monkeypatch.setenv`, `"X" in os.environ`, a dict passed
as `env=` or spread with `**os.environ`, and copies of `os.environ`
(`env = os.environ.copy(); env["X"] = ..`). The same name in a comment, docstring or log message is not a
finding.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.conditions import any_string, uses
from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.patterns import keyword, positional
from neuron_migrate.migrate.rule import Invalid, Rule

#: calls whose first argument is a variable name
_NAME_FIRST = {"os.getenv", "os.putenv", "os.unsetenv"}
_ENV_METHODS = {"get", "pop", "setdefault"}  # methods of os.environ (or a copy) taking the name first
_ENV_LIKE_NAME = re.compile(r"^(env|environ|environment|env_vars|\w+_env)$")
_LAUNCHERS = {
    *(
        f"subprocess.{f}"
        for f in ("run", "call", "check_call", "check_output", "Popen", "getoutput", "getstatusoutput")
    ),
    *(f"os.{f}" for f in ("system", "popen", "execv", "execvp", "execvpe", "execl", "execlp", "spawnlp")),
    "asyncio.create_subprocess_exec",
    "asyncio.create_subprocess_shell",
}
_NVIDIA_SMI = re.compile(r"(?<![\w-])nvidia-smi(?![\w-])")
_USES_LAUNCHER = uses(_LAUNCHERS)


class _ScopedAssignments(Rule):
    """Remembers the last value assigned to each plain name, per function scope, to follow `env`/`cmd`
    names."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._scopes: list[dict[str, cst.BaseExpression]] = [{}]

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.append({})

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self._scopes[-1][target.target.value] = node.value

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.target, cst.Name) and node.value is not None:
            self._scopes[-1][node.target.value] = node.value

    def assigned(self, node: cst.CSTNode) -> cst.BaseExpression | None:
        if isinstance(node, cst.Name):
            for scope in reversed(self._scopes):
                if node.value in scope:
                    return scope[node.value]
        return None


class _EnvVarRule(_ScopedAssignments):
    """Reports variable names in environment positions for which `advice` returns something."""

    def advice(self, var: str) -> str | None:
        """What to do about environment variable `var`, or None when it is not this rule's (each subclass
        overrides this; the rule examples test that it does)."""
        return None

    def _report(self, node: cst.CSTNode, var: str) -> None:
        advice = self.advice(var)
        if advice is not None:
            self.report(node, self.message.format(var=var, advice=advice))

    def _is_env(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Whether `node` is `os.environ`, a copy of it, or a name holding one."""
        if depth > 3:
            return False
        if self.ctx.qualified_name(node) == "os.environ":
            return True
        if isinstance(node, cst.Name):
            value = self.assigned(node)
            return _ENV_LIKE_NAME.match(node.value) is not None or (
                value is not None and self._is_env(value, depth + 1)
            )
        if isinstance(node, cst.Dict):
            return any(
                isinstance(e, cst.StarredDictElement) and self._is_env(e.value, depth + 1)
                for e in node.elements
            )
        if isinstance(node, cst.Call):
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value in ("copy", "keys") and not node.args:
                return self._is_env(func.value, depth + 1)
            first = positional(node, 0)
            return (
                self.ctx.call_name(node) in ("dict", "copy.copy", "copy.deepcopy")
                and first is not None
                and (self._is_env(first.value, depth + 1))
            )
        return False

    def _mapping_keys(self, node: cst.CSTNode, depth: int = 0) -> Iterator[tuple[cst.CSTNode, str]]:
        """The literal keys of a mapping expression: `{"X": ..}`, `dict(m, X=..)`, or a name bound to one."""
        if depth > 3:
            return
        if isinstance(node, cst.Dict):
            for element in node.elements:
                if isinstance(element, cst.DictElement) and (var := string_value(element.key)) is not None:
                    yield element.key, var
        elif isinstance(node, cst.Call) and self.ctx.call_name(node) == "dict":
            yield from self._call_keys(node, depth)
        elif (value := self.assigned(node)) is not None:
            yield from self._mapping_keys(value, depth + 1)

    def _call_keys(self, call: cst.Call, depth: int = 0) -> Iterator[tuple[cst.CSTNode, str]]:
        for arg in call.args:
            if arg.keyword is not None:
                yield arg.keyword, arg.keyword.value
            elif not arg.star:
                yield from self._mapping_keys(arg.value, depth + 1)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        index = node.slice[0].slice if len(node.slice) == 1 else None
        if (
            isinstance(index, cst.Index)
            and (var := string_value(index.value)) is not None
            and self._is_env(node.value)
        ):
            self._report(index.value, var)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        var = string_value(node.left)
        target = node.comparisons[0]
        if (
            var is not None
            and isinstance(target.operator, (cst.In, cst.NotIn))
            and self._is_env(target.comparator)
        ):
            self._report(node.left, var)

    def visit_Dict(self, node: cst.Dict) -> None:
        if self._is_env(node):  # {**os.environ, "X": ..}
            for key, var in self._mapping_keys(node):
                self._report(key, var)

    def visit_Call(self, node: cst.Call) -> None:
        name, func = self.ctx.call_name(node), node.func
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        first = positional(node, 0) or keyword(node, "key")
        if (
            name in _NAME_FIRST
            or method in ("setenv", "delenv")
            or (method in _ENV_METHODS and self._is_env(func.value))
        ):
            if first is not None and (var := string_value(first.value)) is not None:
                self._report(first.value, var)
        elif (method == "update" and self._is_env(func.value)) or (
            name == "dict" and first is not None and self._is_env(first.value)
        ):
            for key, var in self._call_keys(node):
                self._report(key, var)
        if (env := keyword(node, "env")) is not None:
            for key, var in self._mapping_keys(env.value):
                self._report(key, var)


_NO_EQUIVALENT = "it has no Neuron equivalent: set it only for CUDA runs"
_TOOLKIT = "there is no CUDA toolkit on Trainium: make the code that needs it CUDA-only"


class CudaEnvVar(_EnvVarRule):
    """A CUDA environment variable read or set by the program.

    What it does
    Flags `CUDA_VISIBLE_DEVICES`, `CUDA_LAUNCH_BLOCKING`, `PYTORCH_CUDA_ALLOC_CONF`, `CUDA_HOME`, `CUDA_PATH`
    and a few other CUDA runtime variables where the code uses them as environment variable names
    (`os.environ[...]`, `.get`, `.setdefault`, `os.getenv`, `"X" in os.environ`, `env=` dicts of subprocesses).

    Why it matters on Trainium
    The Neuron runtime ignores them. `CUDA_VISIBLE_DEVICES` does not restrict which NeuronCores a process
    sees: `NEURON_RT_VISIBLE_CORES` does, and it counts logical NeuronCores (several per chip), so the values
    differ. `CUDA_LAUNCH_BLOCKING=1` corresponds to `NEURON_LAUNCH_BLOCKING=1`.

    Example
    os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)

    Use instead
    os.environ["NEURON_RT_VISIBLE_CORES"] = str(local_rank)  # a NeuronCore index, not a GPU index

    Fix safety
    No automatic fix: the Neuron variables take different values, and some CUDA variables have no equivalent.
    """  # noqa: E501 - rendered verbatim into docs/rules.md

    code = "NM601"
    cuda_only = False  # setting it is harmless where CUDA is missing
    name = "cuda-env-var"
    message = "`{var}` is CUDA-only: {advice}"
    severity = "warning"
    triggers = (b"CUDA_",)
    ADVICE: ClassVar[dict[str, str]] = {
        "CUDA_VISIBLE_DEVICES": "select NeuronCores with `NEURON_RT_VISIBLE_CORES` (core indices or a range "
        "such as `0-3`; cores, not GPUs)",
        "CUDA_LAUNCH_BLOCKING": "use `NEURON_LAUNCH_BLOCKING=1` for synchronous execution while debugging",
        "PYTORCH_CUDA_ALLOC_CONF": "it tunes the CUDA caching allocator only; " + _NO_EQUIVALENT,
        "PYTORCH_NO_CUDA_MEMORY_CACHING": _NO_EQUIVALENT,
        "CUDA_HOME": _TOOLKIT,
        "CUDA_PATH": _TOOLKIT,
        "TORCH_CUDA_ARCH_LIST": "it picks GPU architectures for CUDA extension builds: make the build "
        "CUDA-only",
        "CUDA_DEVICE_ORDER": "select NeuronCores with `NEURON_RT_VISIBLE_CORES`",
        "CUDA_DEVICE_MAX_CONNECTIONS": _NO_EQUIVALENT,
        "CUDA_MODULE_LOADING": _NO_EQUIVALENT,
    }
    VALID = (
        'import os\nos.environ["NEURON_RT_VISIBLE_CORES"] = "0-3"\n',
        'import logging\nlogging.info("set CUDA_VISIBLE_DEVICES to pick a GPU")\n',
        '"""Set CUDA_VISIBLE_DEVICES before running."""\n# CUDA_LAUNCH_BLOCKING=1 helps debugging\n',
        'config = {"name": "CUDA_VISIBLE_DEVICES"}\nprint(config["name"])\n',
        'import os\nx = os.environ.get("HOME", "CUDA_HOME")\n',
    )
    INVALID = (
        Invalid(
            'import os\nos.environ["CUDA_VISIBLE_DEVICES"] = str(rank)\n',
        ),
        Invalid(
            'from os import environ, getenv\nenviron.setdefault("CUDA_VISIBLE_DEVICES", "0")\n'
            'home = getenv("CUDA_HOME") or environ.get("CUDA_PATH")\n',
            count=3,
        ),
        Invalid(
            'import os\nif "CUDA_LAUNCH_BLOCKING" not in os.environ:\n'
            '    os.putenv("CUDA_LAUNCH_BLOCKING", "1")\n',
            count=2,
        ),
        Invalid(
            "import os, subprocess\ndef launch(cmd):\n    env = os.environ.copy()\n"
            '    env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"\n'
            '    subprocess.run(cmd, env={**env, "CUDA_VISIBLE_DEVICES": "1"})\n',
            count=2,
        ),
        Invalid(
            'import os, subprocess\nextra = {"CUDA_VISIBLE_DEVICES": "0,1"}\n'
            'subprocess.Popen(["python", "train.py"], env=extra)\n',
        ),
        Invalid(
            'import os\nos.environ.update({"CUDA_VISIBLE_DEVICES": "0"}, CUDA_LAUNCH_BLOCKING="1")\n',
            count=2,
        ),
        Invalid(
            'def test_cpu(monkeypatch):\n    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")\n',
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """One of the variables in ADVICE, as a string or a keyword (`os.environ.update(CUDA_HOME=...)`)."""
        return not lex.strings.isdisjoint(cls.ADVICE) or not lex.names.isdisjoint(cls.ADVICE)

    def advice(self, var: str) -> str | None:
        return self.ADVICE.get(var)


class NcclEnvVar(_EnvVarRule):
    """An NCCL environment variable read or set by the program.

    What it does
    Flags `NCCL_*` and `TORCH_NCCL_*` names (`NCCL_DEBUG`, `NCCL_SOCKET_IFNAME`, `TORCH_NCCL_BLOCKING_WAIT`, …)
    where the code uses them as environment variable names.

    Why it matters on Trainium
    Trainium collectives do not go through NCCL, so these settings do nothing there, and debugging or
    network tuning that relied on them silently stops working.

    Example
    os.environ["NCCL_DEBUG"] = "INFO"

    Use instead
    os.environ["NEURON_RT_LOG_LEVEL"] = "INFO"  # runtime logs; see the Neuron runtime variable reference

    Fix safety
    No automatic fix: Neuron's runtime and collectives variables are not one-for-one replacements.
    """  # noqa: E501 - rendered verbatim into docs/rules.md

    code = "NM602"
    cuda_only = False  # setting it is harmless where CUDA is missing
    name = "nccl-env-var"
    message = "`{var}` configures NCCL, which Trainium does not use: {advice}"
    severity = "warning"
    triggers = (b"NCCL_",)
    VALID = (
        'import os\nos.environ["NEURON_RT_LOG_LEVEL"] = "INFO"\n',
        'print("export NCCL_DEBUG=INFO to debug hangs")\n',
        'parser.add_argument("--nccl-debug", help="value for NCCL_DEBUG")\n',
    )
    INVALID = (
        Invalid(
            'import os\nos.environ["NCCL_DEBUG"] = "INFO"\nlevel = os.getenv("NCCL_DEBUG_SUBSYS")\n',
            count=2,
        ),
        Invalid(
            'import os as system\nif "TORCH_NCCL_ASYNC_ERROR_HANDLING" in system.environ:\n    pass\n',
        ),
        Invalid(
            'import os, subprocess\nsubprocess.run(cmd, env=dict(os.environ, NCCL_P2P_DISABLE="1"))\n',
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """An NCCL variable, as a string or a keyword."""
        return any(v.startswith(("NCCL_", "TORCH_NCCL_")) for v in (*lex.strings, *lex.names))

    def advice(self, var: str) -> str | None:
        if not var.startswith(("NCCL_", "TORCH_NCCL_")):
            return None
        if var in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS"):
            return "set it only for CUDA runs; for Neuron runtime logs set `NEURON_RT_LOG_LEVEL`"
        return "set it only for CUDA runs (Neuron collectives have their own runtime variables)"


class NvidiaSmi(_ScopedAssignments):
    """`nvidia-smi` run as a program.

    What it does
    Flags `subprocess.run/call/check_output/Popen`, `os.system`, `os.popen` (and the `exec*` family) whose
    command runs `nvidia-smi`, as a list or as a shell string, also through a name bound to the command.

    Why it matters on Trainium
    There is no `nvidia-smi` on a Trainium instance: the call fails, or GPU queries built on it report nothing.

    Example
    subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv"])

    Use instead
    subprocess.run(["neuron-ls"])  # devices; `neuron-top` / `neuron-monitor` for utilisation and memory

    Fix safety
    No automatic fix: the Neuron tools print different output, so the code parsing it must change too.
    """  # noqa: E501 - rendered verbatim into docs/rules.md

    code = "NM603"
    name = "nvidia-smi"
    message = (
        "`nvidia-smi` does not exist on Trainium: use `neuron-ls` (devices) or `neuron-top` / "
        "`neuron-monitor`"
    )
    severity = "warning"
    triggers = (b"nvidia-smi",)
    VALID = (
        'import subprocess\nsubprocess.run(["neuron-ls"])\n',
        'print("run nvidia-smi to check the GPU")\n',
        'import subprocess\nsubprocess.run(["echo", "nvidia-smi-like"])\n',
    )
    INVALID = (
        Invalid(
            'import subprocess\nout = subprocess.check_output(["nvidia-smi", "-L"], text=True)\n',
        ),
        Invalid(
            'import os\nos.system("nvidia-smi --query-gpu=name --format=csv > gpus.txt")\n',
        ),
        Invalid(
            'from subprocess import Popen as P\ndef probe():\n    cmd = "/usr/bin/nvidia-smi -q"\n'
            "    return P(cmd, shell=True)\n",
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """A process launcher and a string that runs `nvidia-smi`."""
        return _USES_LAUNCHER(lex) and any_string(lex, lambda s: bool(_NVIDIA_SMI.search(s)))

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.call_name(node) not in _LAUNCHERS:
            return
        command = positional(node, 0) or keyword(node, "args") or keyword(node, "cmd")
        if command is None:
            return
        value = self.assigned(command.value) or command.value
        if any(_NVIDIA_SMI.search(text) for text in _strings(value)):
            self.report(node)


def _strings(node: cst.CSTNode) -> Iterator[str]:
    """The text of every string literal (and f-string text part) inside `node`."""
    if isinstance(node, cst.SimpleString) and (value := string_value(node)) is not None:
        yield value
    elif isinstance(node, cst.FormattedStringText):
        yield node.value
    else:
        for child in node.children:
            yield from _strings(child)
