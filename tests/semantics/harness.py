"""Running the semantics scripts: subprocesses, `neuron-migrate fix`, and reading what they print.

Every script runs in its own interpreter (the rewrites change process-wide state such as the current
accelerator, and the stand-in `neuron` device cannot be unregistered), several at a time because each one
spends most of its time importing torch.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCRIPTS = HERE / "scripts"
REFERENCES = HERE / "references"
NAMES = ("ddp_trainer", "amp_trainer", "benchmark", "string_device")
TIMEOUT = 120
#: one thread per interpreter: several run at once on a small machine, and script and reference must agree
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}

_LOSS = re.compile(r"^step (\d+) loss (-?\d+\.\d{6})$")
_LEFT = re.compile(r"^\s+(\S+?\.py):(\d+):\d+ (NM\d{3}) ")

# Runs the script the way `python script.py` does, after registering the stand-in `neuron` device.
STANDIN_WRAPPER = """\
import os, runpy, sys
from neuron_migrate.opdb.tracer import device
device.install()
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as done:
    code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    if done.code is not None and not isinstance(done.code, int):
        print(done.code, file=sys.stderr)
else:
    code = 0
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)  # skip teardown, as the trace child does: torch can abort there after the stand-in ran autograd
"""  # noqa: E501 - script source, kept as written


@dataclass(frozen=True)
class Run:
    """One finished subprocess."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        """What to show when an assertion about this run fails."""
        return (
            f"\n$ {' '.join(self.args)}\nexit {self.returncode}\n--- stdout ---\n{self.stdout[-2000:]}"
            f"\n--- stderr ---\n{self.stderr[-3000:]}"
        )

    @property
    def losses(self) -> list[tuple[int, str]]:
        """The `step N loss X.XXXXXX` lines as (N, 'X.XXXXXX'), in order."""
        return [(int(m[1]), m[2]) for line in self.stdout.splitlines() if (m := _LOSS.match(line.strip()))]

    @property
    def device_line(self) -> str | None:
        """The last `device ...` line the script printed."""
        lines = [line.strip() for line in self.stdout.splitlines() if line.startswith("device ")]
        return lines[-1] if lines else None


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = TIMEOUT) -> Run:
    """Run `sys.executable ARGS` in `cwd` with a timeout; never raises for a failing child."""
    command = [sys.executable, *args]
    try:
        proc = subprocess.run(
            command,
            check=False,
            cwd=cwd,
            env={**ENV, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return Run(tuple(args), -1, "", f"timed out after {timeout} s")
    return Run(tuple(args), proc.returncode, proc.stdout, proc.stderr)


# Runs several scripts in one interpreter, each as `python script.py` would (its own argv, cwd, sys.path[0]
# and captured output), to pay for importing torch once. Only for scripts that change no process-wide state
# the next one depends on: the references, and the originals (which crash or run on CPU).
BATCH_RUNNER = """\
import contextlib, io, json, os, runpy, sys, traceback
jobs, results, path = json.loads(sys.argv[1]), {}, list(sys.path)
for name, script, args, cwd in jobs:
    out, err, code = io.StringIO(), io.StringIO(), 0
    os.chdir(cwd)
    sys.argv, sys.path[:] = [script, *args], [os.path.dirname(os.path.abspath(script)), *path]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        except BaseException:
            traceback.print_exc()
            code = 1
    results[name] = [code, out.getvalue(), err.getvalue()]
sys.__stdout__.write(json.dumps(results))
"""


def run_batch(jobs: dict[str, tuple[Path, list[str], Path]], cwd: Path) -> dict[str, Run]:
    """Run scripts (name -> (script, args, cwd)) one after another in one interpreter (see BATCH_RUNNER)."""
    spec = [[name, str(script), args, str(where)] for name, (script, args, where) in jobs.items()]
    batch = run(["-c", BATCH_RUNNER, json.dumps(spec)], cwd, timeout=TIMEOUT * 2)
    try:
        results = json.loads(batch.stdout)
    except ValueError:
        raise AssertionError(f"the batch runner failed:{batch.describe()}") from None
    return {name: Run((str(script), *args), *results[name]) for name, (script, args, _) in jobs.items()}


def run_all(jobs: dict[str, Callable[[], T]]) -> dict[str, T]:
    """Call several jobs (each starting subprocesses) at once; returns their results by job name."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


#: the scripts are moved for the torch TorchNeuron runs on (for an older torch the memory functions' fixes
#: are unsafe: they raise on MPS before 2.13)
PROJECT = '[tool.neuron-migrate]\ntarget-torch = "2.13"\n'


def copy_scripts(target: Path) -> Path:
    """A fresh copy of the CUDA-style scripts (`fix --write` edits files in place), with their `PROJECT`."""
    target.mkdir(parents=True)
    for name in NAMES:
        shutil.copy(SCRIPTS / f"{name}.py", target / f"{name}.py")
    (target / "pyproject.toml").write_text(PROJECT)
    return target


def fix_args(*paths: Path, unsafe: bool = False) -> list[str]:
    """`python -m neuron_migrate fix --write PATHS` (plus `--unsafe-fixes`)."""
    return [
        "-m",
        "neuron_migrate",
        "fix",
        "--write",
        *(["--unsafe-fixes"] if unsafe else []),
        *map(str, paths),
    ]


def left_for_a_person(fix: Run) -> dict[str, dict[int, set[str]]]:
    """From `fix`'s summary: file name -> line -> rule codes it left for a person."""
    left: dict[str, dict[int, set[str]]] = {}
    for line in fix.stderr.splitlines():
        if m := _LEFT.match(line):
            left.setdefault(Path(m[1]).name, {}).setdefault(int(m[2]), set()).add(m[3])
    return left


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


#: what torch 2.13 prints when a gloo worker thread is still joinable while the interpreter shuts down,
#: after the script has finished (and called destroy_process_group): a rare race in torch's teardown, not
#: the script's (pytorch/pytorch#190489; the atexit fix in pytorch/pytorch#179291 was abandoned)
GLOO_TEARDOWN_ABORT = "terminate called without an active exception"


def run_torchrun_style(args: list[str], cwd: Path, attempts: int = 3) -> Run:
    """Run a script as torchrun would start a one-process job (WORLD_SIZE=1, a free MASTER_PORT each attempt).

    A run that aborts in torch's gloo teardown after it printed everything runs again: that abort says nothing
    about the script. Any other failure is returned as it is."""
    for _ in range(attempts):
        env = {"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
        result = run(args, cwd, {**env, "MASTER_PORT": str(free_port())})
        if not (result.returncode == -6 and result.stderr.strip() == GLOO_TEARDOWN_ABORT):
            break
    return result


# --- CUDA constructs left in a source file ------------------------------------------------------------------

_CUDA_STRING = re.compile(r"^cuda(:\d*)?$")


def cuda_constructs(source: str) -> list[tuple[int, str]]:
    """(line, what) for each CUDA construct in code: `torch.cuda` references and imports, and strings that
    name a CUDA device ('cuda', 'cuda:0', f"cuda:{i}", also as the left operand of `in`). Docstrings, comments
    and other text do not count, nor do the strings of a list of device types that names neuron too
    (`d.type in ("cuda", "neuron")`: neuron already takes CUDA's side there)."""
    found = []
    tree = ast.parse(source)
    with_neuron = {
        id(element)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set))
        and any(isinstance(e, ast.Constant) and str(e.value).startswith("neuron") for e in node.elts)
        for element in node.elts
    }
    for node in ast.walk(tree):
        if id(node) in with_neuron:
            continue
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "cuda"
            and isinstance(node.value, ast.Name)
            and node.value.id == "torch"
        ):
            found.append((node.lineno, "torch.cuda"))
        elif (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch.cuda")) or (
            isinstance(node, ast.ImportFrom)
            and node.module == "torch"
            and any(alias.name == "cuda" for alias in node.names)
        ):
            found.append((node.lineno, f"from {node.module} import ..."))
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and _CUDA_STRING.match(node.value)
        ):
            found.append((node.lineno, repr(node.value)))
        elif (
            isinstance(node, ast.JoinedStr)
            and node.values
            and isinstance(node.values[0], ast.Constant)
            and str(node.values[0].value).startswith("cuda")
        ):
            found.append((node.lineno, "f-string naming a CUDA device"))
    return sorted(set(found))


def statement_span(source: str, line: int) -> range:
    """The lines of the smallest statement (or compound-statement header with its decorators) around
    `line`."""
    best = range(line, line + 1)
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.stmt):
            continue
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        body = getattr(node, "body", None)
        end = body[0].lineno - 1 if isinstance(body, list) and body else node.end_lineno
        span = range(start, max(start, end) + 1)
        if line in span and (len(best) == 1 or len(span) < len(best)):
            best = span
    return best


def unexplained_cuda(source: str, left_lines: set[int]) -> list[str]:
    """CUDA constructs still in `source` whose statement `fix` did not report as left for a person."""
    return [
        f"line {line}: {what}: {source.splitlines()[line - 1].strip()}"
        for line, what in cuda_constructs(source)
        if not left_lines & set(statement_span(source, line))
    ]


# --- known gaps: strict xfails that fire only on the failure they document ---------------------------------


class KnownGap(Exception):
    """A test hit exactly the documented gap (a rewrite bug or a stand-in limitation)."""


@dataclass(frozen=True)
class Gap:
    """A documented reason why a case fails today, and the text that identifies that failure."""

    reason: str
    signature: str

    def mark(self):
        import pytest

        return pytest.mark.xfail(strict=True, raises=KnownGap, reason=self.reason)

    def check(self, text: str) -> None:
        """Raise KnownGap when `text` (a child's stderr, a list of leftovers) shows this gap."""
        if self.signature in text:
            raise KnownGap(self.reason)
