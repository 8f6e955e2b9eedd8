"""Where a test suite decides whether a test runs: a CUDA check there is the test's gate, not device code.

`@pytest.mark.skipif(not torch.cuda.is_available(), ...)`, `unittest.skipUnless(...)`, a `parametrize` value
(`{False, torch.cuda.is_available()}`), or the test of an `if` whose body skips (`pytest.skip(...)`,
`self.skipTest(...)`, `raise unittest.SkipTest(...)`). Made generic, such a check runs the test on every
accelerator host, MPS and XPU CI runners among them, and a test written for CUDA (`'cuda'` in its
parameters, `patch('torch.cuda.is_available', ...)`) then fails there: skorch's test suite (review 14).
A module-level skip (`pytest.skip(..., allow_module_level=True)`, `pytestmark = pytest.mark.skipif(...)`)
gates every test of the module (`module_skip`, `skipif_mark`; `cuda_context` reads them).
"""

from __future__ import annotations

from itertools import pairwise

import libcst as cst

from neuron_migrate.migrate.names import dotted
from neuron_migrate.migrate.walk import innermost_function

_GATE_DECORATORS = frozenset({"skipif", "skipIf", "skipUnless", "parametrize"})
_SKIPS = frozenset({"skip", "skipTest", "xfail", "SkipTest"})

SKIP_GATE = (
    "it decides whether a test runs (`{gate}`): rewritten, the test also runs on MPS and XPU hosts (CI "
    "runners among them); check that the test is device-generic, or keep this check CUDA's and add `neuron`"
)


def is_test_module(path: str) -> bool:
    """Whether the file at `path` is a pytest module (`test_*.py`, `*_test.py`)."""
    file = path.rsplit("/", 1)[-1]
    return file.startswith("test_") or file.endswith("_test.py")


def skip_gate(ctx, stack: tuple[cst.CSTNode, ...]) -> str | None:
    """The skip construct whose condition holds the node at the end of `stack` (its source, shortened), or
    None."""
    for parent, child in pairwise(stack):
        call = parent.decorator if isinstance(parent, cst.Decorator) else None
        gate = isinstance(call, cst.Call) and _last_name(call.func) in _GATE_DECORATORS
        if gate and child is not call.func:
            return ctx.excerpt(call)
        if isinstance(parent, cst.If) and child is parent.test and _skips(parent.body):
            return ctx.excerpt(parent.test)
    return None


def _last_name(expression: cst.BaseExpression) -> str:
    return (dotted(expression) or "").rsplit(".", 1)[-1]


def _skips(body: cst.BaseSuite) -> bool:
    """Whether a block skips the test: a statement of it calls `pytest.skip` / `self.skipTest` /
    `pytest.xfail`, or raises `SkipTest`."""
    return bool(_skip_calls(body))


def module_skip(body: cst.BaseSuite) -> cst.Call | None:
    """The call with which a block skips a whole test module, if any: `pytest.skip(...,
    allow_module_level=True)`, or a raised `unittest.SkipTest(...)`."""
    for call, raised in _skip_calls(body):
        name = _last_name(call.func)
        keywords = {a.keyword.value for a in call.args if a.keyword is not None}
        module_level = "allow_module_level" in keywords
        if (name == "SkipTest" and raised) or (name == "skip" and module_level):
            return call
    return None


def skipif_mark(statement: cst.CSTNode) -> cst.Call | None:
    """The `skipif` mark of `pytestmark = pytest.mark.skipif(...)` (alone or in a list), if the statement is
    that: it gates every test of the module."""
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and statement.body else None
    if not isinstance(small, cst.Assign) or dotted(small.targets[0].target) != "pytestmark":
        return None
    values = [e.value for e in small.value.elements] if isinstance(small.value, cst.List) else [small.value]
    return next(
        (v for v in values if isinstance(v, cst.Call) and (dotted(v.func) or "").endswith(".skipif")), None
    )


def _skip_calls(body: cst.BaseSuite) -> list[tuple[cst.Call, bool]]:
    """The skip calls a block's statements make, each with whether it is raised (`raise SkipTest(...)`)."""
    if isinstance(body, cst.SimpleStatementSuite):  # `if not ...: pytest.skip(...)` on one line
        smalls = list(body.body)
    else:
        smalls = [s for line in body.body if isinstance(line, cst.SimpleStatementLine) for s in line.body]
    found = []
    for small in smalls:
        value = small.value if isinstance(small, cst.Expr) else getattr(small, "exc", None)
        if isinstance(value, cst.Call) and _last_name(value.func) in _SKIPS:
            found.append((value, isinstance(small, cst.Raise)))
    return found


def parametrized_without_neuron(ctx, pending) -> str | None:
    """For a device test of a test's parameter (`device == "cuda"`), the `parametrize` values that parameter
    takes, as text, when they are strings none of which is neuron's: the test never asks it of neuron, so
    letting neuron in would be dead code (IOPaint's `@pytest.mark.parametrize("device", ["cuda", "mps",
    "cpu"])`, review 44 #13)."""
    test = pending.node
    if not (isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name)):
        return None
    name = test.left.value
    function = innermost_function(pending.stack)
    if function is None or name not in {p.name.value for p in function.params.params}:
        return None
    for decorator in function.decorators:
        call = decorator.decorator
        if not (
            isinstance(call, cst.Call) and _last_name(call.func) == "parametrize" and len(call.args) >= 2
        ):
            continue
        names = call.args[0].value
        if not isinstance(names, cst.SimpleString):
            continue
        listed = [part.strip() for part in names.evaluated_value.split(",")]
        values = call.args[1].value
        if name not in listed or not isinstance(values, (cst.List, cst.Tuple)):
            continue
        index = listed.index(name)
        strings = [_value_at(element.value, index, len(listed)) for element in values.elements]
        if (
            strings
            and all(isinstance(s, str) for s in strings)
            and not any(s.startswith("neuron") for s in strings)
        ):
            return ctx.excerpt(values)
    return None


def _value_at(value: cst.BaseExpression, index: int, width: int) -> str | None:
    """The string at `index` of one `parametrize` value (the value itself for one name, the tuple's item for
    several), or None when it is not a string literal."""
    if width > 1:
        if not (isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == width):
            return None
        value = value.elements[index].value
    return value.evaluated_value if isinstance(value, cst.SimpleString) else None
