"""What the differential tests run: every fixable rule example and every corpus snippet, rewritten both ways.

`Case`s are known without rewriting anything (pytest collects them cheaply); `Results` rewrites each case with
the safe tier and with `--unsafe-fixes` and runs, in one child per environment: the original and its safe
rewrite under the CUDA emulation, the full rewrite on plain CPU and on the stand-in `neuron` device. A text
that occurs more than once in an environment runs once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from tests.differential.adapters import rewrite
from tests.differential.execution import Outcome
from tests.differential.harness import Job, run_everywhere

CORPUS = Path(__file__).resolve().parent / "corpus"


@dataclass(frozen=True)
class Case:
    """One program to check: a rule's INVALID example (a fragment, with stand-ins) or a corpus snippet."""

    id: str
    source: str
    fragment: bool
    rule: str | None = None


def rule_cases() -> list[Case]:
    """Every INVALID example that declares a fix, as `NM101-invalid-0`."""
    from neuron_migrate.migrate.rule import load_rules

    return [
        Case(f"{code}-invalid-{i}", example.code, True, code)
        for code, rule in load_rules().items()
        for i, example in enumerate(rule.INVALID)
        if example.fixed is not None
    ]


def corpus_cases() -> list[Case]:
    """Every snippet in corpus/, as `corpus/<name>`."""
    return [
        Case(f"corpus/{path.stem}", path.read_text(), False)
        for path in sorted(CORPUS.glob("*.py"))
        if path.name != "__init__.py"
    ]


def all_cases() -> list[Case]:
    return rule_cases() + corpus_cases()


class Results:
    """The rewrites and the runs of all cases, computed on first use."""

    def __init__(self, cases: list[Case]) -> None:
        self.cases = {case.id: case for case in cases}

    @cached_property
    def safe(self) -> dict[str, str]:
        return {key: rewrite(case.source, unsafe=False) for key, case in self.cases.items()}

    @cached_property
    def full(self) -> dict[str, str]:
        """The rewrite with the unsafe tier too: what the CPU and neuron runs check."""
        return {key: rewrite(case.source, unsafe=True) for key, case in self.cases.items()}

    @cached_property
    def runs(self) -> dict[str, dict[str, Outcome]]:
        """env -> "<case id>/<original|safe|full>" -> outcome."""
        wanted = {"cuda": {}, "cpu": {}, "neuron": {}}
        for key, case in self.cases.items():
            wanted["cuda"][f"{key}/original"] = Job(case.source, case.fragment)
            wanted["cuda"][f"{key}/safe"] = Job(self.safe[key], case.fragment)
            wanted["cpu"][f"{key}/full"] = Job(self.full[key], case.fragment)
            wanted["neuron"][f"{key}/full"] = Job(self.full[key], case.fragment)
        unique = {env: {} for env in wanted}
        alias = {env: {} for env in wanted}
        for env, jobs in wanted.items():
            first: dict[Job, str] = {}
            for name, job in jobs.items():
                alias[env][name] = first.setdefault(job, name)
                unique[env].setdefault(alias[env][name], job)
        ran = run_everywhere(unique)
        return {env: {name: ran[env][alias[env][name]] for name in jobs} for env, jobs in wanted.items()}

    def outcome(self, env: str, case_id: str, version: str) -> Outcome:
        return self.runs[env][f"{case_id}/{version}"]
