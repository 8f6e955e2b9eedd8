"""Every torch API in the codemod's output exists in torch 2.13 and accepts the argument style used.

The texts: the `fixed` text of every INVALID example (what the rule documentation promises) and both rewrites
(safe tier, and with --unsafe-fixes) of every differential case. Known violations are entries
`emitted/<call style>` of test_differential.KNOWN_FAILURES; the test fails when one appears and when one is
gone (then the entry goes).
"""

from __future__ import annotations

import pytest

from neuron_migrate.migrate.rule import load_rules
from tests.differential.apis import check_call, torch_calls
from tests.differential.test_differential import KNOWN_FAILURES

pytestmark = pytest.mark.xdist_group("differential")


def _texts(results) -> dict[str, str]:
    texts = {
        f"{code}-invalid-{i}/fixed": example.fixed
        for code, rule in load_rules().items()
        for i, example in enumerate(rule.INVALID)
        if example.fixed is not None
    }
    texts.update({f"{key}/safe": text for key, text in results.safe.items()})
    texts.update({f"{key}/full": text for key, text in results.full.items()})
    return texts


def test_emitted_torch_apis_exist_and_bind(results):
    problems: dict[str, str] = {}
    checked = set()
    for where, text in _texts(results).items():
        try:
            calls = torch_calls(text)
        except SyntaxError as err:
            problems[f"emitted/{where}"] = f"does not parse: {err.msg}"
            continue
        for call in calls:
            checked.add(str(call))
            if problem := check_call(call):
                problems[f"emitted/{call}"] = f"{problem} (in {where})"
    assert "torch.accelerator.current_accelerator(check_available=)" in checked  # the device idiom was seen
    assert len(checked) > 50, sorted(checked)
    known = {key for key in KNOWN_FAILURES if key.startswith("emitted/")}
    assert not set(problems) - known, "new:\n" + "\n".join(
        f"{k}: {problems[k]}" for k in sorted(set(problems) - known)
    )
    assert not known - set(problems), f"fixed (remove from KNOWN_FAILURES): {sorted(known - set(problems))}"
