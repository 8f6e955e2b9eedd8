"""One shared workspace for the semantics tests: the scripts run as written, rewritten, and their
references."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from tests.semantics.harness import (
    NAMES,
    REFERENCES,
    Run,
    copy_scripts,
    fix_args,
    run,
    run_all,
    run_batch,
    run_torchrun_style,
)


@dataclass
class Workspace:
    """Everything the CPU tests compare, built once per session."""

    original_dir: Path
    rewritten_dir: Path
    originals: dict[str, Run]
    references: dict[str, Run]
    fix: Run
    rewritten_sources: dict[str, str]
    second_fix: Run
    after_second_fix: dict[str, str]
    rewritten: dict[str, Run]
    ddp_unsafe_fix: Run
    ddp_world_size_1: Run


def _originals_and_references(original_dir: Path, base: Path) -> dict[str, Run]:
    """The references and the scripts as written, in one interpreter (they share no state that matters)."""
    jobs = {f"reference/{n}": (REFERENCES / f"{n}.py", [], base) for n in NAMES}
    jobs["reference/amp_trainer_fp16"] = (REFERENCES / "amp_trainer.py", ["--autocast", "float16"], base)
    jobs["reference/benchmark_device_rng"] = (REFERENCES / "benchmark.py", ["--device-generator"], base)
    jobs.update({f"original/{n}": (original_dir / f"{n}.py", [], original_dir) for n in NAMES})
    return run_batch(jobs, base)


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    base = tmp_path_factory.mktemp("semantics")
    original_dir = copy_scripts(base / "original")
    rewritten_dir = copy_scripts(base / "rewritten")
    ddp_dir = base / "ddp_unsafe"
    ddp_dir.mkdir()
    shutil.copy(original_dir / "ddp_trainer.py", ddp_dir)

    # Phase 1: the scripts as written and the references, next to the rewrites (each on its own copy).
    first = run_all(
        {
            "batch": partial(_originals_and_references, original_dir, base),
            "fix": partial(run, fix_args(rewritten_dir), base),
            "fix/ddp_unsafe": partial(run, fix_args(ddp_dir / "ddp_trainer.py", unsafe=True), base),
        }
    )
    rewritten_sources = {n: (rewritten_dir / f"{n}.py").read_text() for n in NAMES}
    # Phase 2: each rewritten script in its own interpreter with no extra flags; DDP with a one-process
    # group as torchrun would start it; a second fix run (on a copy) that must change nothing.
    second_dir = base / "second_fix"
    shutil.copytree(rewritten_dir, second_dir)
    second = run_all(
        {
            **{f"rewritten/{n}": partial(run, [f"{n}.py"], rewritten_dir) for n in NAMES},
            "ddp_world_size_1": partial(run_torchrun_style, ["ddp_trainer.py"], ddp_dir),
            "second_fix": partial(run, fix_args(second_dir), base),
        }
    )
    batch = first["batch"]
    return Workspace(
        original_dir=original_dir,
        rewritten_dir=rewritten_dir,
        originals={n: batch[f"original/{n}"] for n in NAMES},
        references={n: batch[f"reference/{n}"] for n in (*NAMES, "amp_trainer_fp16", "benchmark_device_rng")},
        fix=first["fix"],
        rewritten_sources=rewritten_sources,
        second_fix=second["second_fix"],
        after_second_fix={n: (second_dir / f"{n}.py").read_text() for n in NAMES},
        rewritten={n: second[f"rewritten/{n}"] for n in NAMES},
        ddp_unsafe_fix=first["fix/ddp_unsafe"],
        ddp_world_size_1=second["ddp_world_size_1"],
    )
