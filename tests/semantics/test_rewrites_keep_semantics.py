"""`neuron-migrate fix --write` keeps what four CUDA-style training scripts compute.

For each script in scripts/: the original runs on this CPU-only machine and crashes or takes its explicit CPU
path; `fix --write` rewrites it; the rewritten script runs with no extra flags and prints exactly the losses
of the hand-written CPU reference in references/ (same seed, same op order: bitwise-equal floats on CPU).
The workspace fixture (conftest.py) runs all interpreters once, several at a time.
"""

from __future__ import annotations

import ast

import pytest

from tests.migrate.helpers import findings
from tests.semantics.harness import (
    NAMES,
    SCRIPTS,
    Gap,
    Run,
    cuda_constructs,
    left_for_a_person,
    unexplained_cuda,
)

# Under `pytest -n ... --dist loadgroup` this keeps the shared workspace to one worker.
pytestmark = pytest.mark.xdist_group("semantics")

#: scripts whose original must crash here (they insist on CUDA); the others take their own CPU path
CRASH_ON_CPU = {"ddp_trainer", "benchmark"}
STEPS = {"ddp_trainer": 5, "amp_trainer": 4, "benchmark": 5, "string_device": 4}

# Documented gaps (rule, input, output, why), each marking only the case it breaks: none today.
RUN_GAPS: dict[str, Gap] = {}


def _cases(gaps: dict[str, Gap]) -> list:
    return [pytest.param(name, marks=gaps[name].mark()) if name in gaps else name for name in NAMES]


def _expect_success(run: Run, gap: Gap | None) -> None:
    if run.returncode != 0 and gap is not None:
        gap.check(run.stderr)
    assert run.returncode == 0, run.describe()


@pytest.mark.parametrize("name", NAMES)
def test_reference_trains(workspace, name):
    """Each reference runs and prints one loss per step: the comparisons below are not between two blanks."""
    reference = workspace.references[name]
    assert reference.returncode == 0, reference.describe()
    assert [step for step, _ in reference.losses] == list(range(STEPS[name])), reference.describe()
    assert len({loss for _, loss in reference.losses}) == STEPS[name], "the model does not train"
    assert reference.device_line is not None and reference.device_line.startswith("device cpu")


@pytest.mark.parametrize("name", NAMES)
def test_original_crashes_or_takes_its_cpu_path(workspace, name):
    original = workspace.originals[name]
    if name in CRASH_ON_CPU:
        assert original.returncode != 0, original.describe()
        assert "cuda" in original.stderr.lower() and original.losses == [], original.describe()
    else:
        assert original.returncode == 0, original.describe()
        assert original.losses == workspace.references[name].losses, original.describe()
        assert original.device_line == workspace.references[name].device_line


def test_fix_writes_every_script(workspace):
    fix = workspace.fix
    left = left_for_a_person(fix)
    assert fix.returncode in (0, 1), fix.describe()
    assert (fix.returncode == 1) == bool(left), f"exit code and leftovers disagree:{fix.describe()}"
    for name in NAMES:
        original = (workspace.original_dir / f"{name}.py").read_text()
        rewritten = workspace.rewritten_sources[name]
        assert rewritten != original, f"{name}.py was not rewritten:{fix.describe()}"
        ast.parse(rewritten)


@pytest.mark.parametrize("name", NAMES)
def test_no_cuda_construct_left_unreported(workspace, name):
    """Every `torch.cuda` use and CUDA device string left in the rewritten file was reported for a person, or
    is a note that needs no change (a CUDA seed right after `torch.manual_seed`)."""
    left = left_for_a_person(workspace.fix).get(f"{name}.py", {})
    source = workspace.rewritten_sources[name]
    noted = {f.line for f in findings(source) if f.fix is None and f.severity == "info"}
    unexplained = unexplained_cuda(source, set(left) | noted)
    assert not unexplained, (
        f"left for a person: {left}\nstill CUDA:\n" + "\n".join(unexplained) + workspace.fix.describe()
    )


@pytest.mark.parametrize("name", NAMES)
def test_cuda_detector_sees_the_originals(name):
    """The leftover check below is not vacuous: on the scripts as written it finds their CUDA constructs,
    and none in their docstrings."""
    source = (SCRIPTS / f"{name}.py").read_text()
    found = cuda_constructs(source)
    assert len({line for line, _ in found}) >= 3, found
    assert all(not source.splitlines()[line - 1].lstrip().startswith(('"""', "#")) for line, _ in found), (
        found
    )


def test_second_fix_changes_nothing(workspace):
    second = workspace.second_fix
    assert second.returncode in (0, 1), second.describe()
    assert workspace.after_second_fix == workspace.rewritten_sources, second.describe()


@pytest.mark.parametrize("name", _cases(RUN_GAPS))
def test_rewritten_script_matches_cpu_reference(workspace, name):
    rewritten, reference = workspace.rewritten[name], workspace.references[name]
    _expect_success(rewritten, RUN_GAPS.get(name))
    assert rewritten.losses == reference.losses, rewritten.describe() + reference.describe()
    assert rewritten.device_line == reference.device_line, rewritten.describe()


def test_ddp_script_with_a_one_process_group(workspace):
    """torchrun-style env (WORLD_SIZE=1): after `fix --write --unsafe-fixes` (NM302 makes `device_ids` depend
    on an accelerator) the process group starts with the device's backend (gloo here) and DDP trains exactly
    like the single-process reference."""
    fix, trained = workspace.ddp_unsafe_fix, workspace.ddp_world_size_1
    assert fix.returncode == 0, fix.describe()
    _expect_success(trained, None)
    assert trained.losses == workspace.references["ddp_trainer"].losses, trained.describe()
    assert trained.device_line == "device cpu", trained.describe()
