"""NM603: `nvidia-smi` run as a program (`subprocess`, `os.system`, ...)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from neuron_migrate.migrate.conditions import any_string, uses
from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.patterns import keyword, positional
from neuron_migrate.migrate.rule import Invalid
from neuron_migrate.migrate.rules.scoped_assignments import ScopedAssignments

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


class NvidiaSmi(ScopedAssignments):
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
