"""How a child describes a failure: error class, last line, and the model's own line (no torch needed)."""

from __future__ import annotations

from neuron_migrate.errors import TargetError
from neuron_migrate.fleet.worker import _error_fields


def _raise_from(filename: str, inner: str | None = None):
    """Call code compiled under fake file names: `filename` calls `inner` (if given) which raises."""
    scope: dict = {}
    if inner:
        exec(
            compile("def deep():\n    raise RuntimeError('first line\\nshape mismatch')\n", inner, "exec"),
            scope,
        )
        body = "def top():\n    deep()\n"
    else:
        body = "def top():\n    raise ValueError('bad config')\n"
    exec(compile(body, filename, "exec"), scope)
    try:
        scope["top"]()
    except Exception as err:
        return err
    raise AssertionError("did not raise")


def test_points_at_the_model_line_and_says_where_torch_raised():
    err = _raise_from(
        "/v/lib/python3.11/site-packages/transformers/models/m/modeling_m.py",
        "/v/lib/python3.11/site-packages/torch/_ops.py",
    )
    fields = _error_fields(err)
    assert fields == {
        "error_class": "RuntimeError",
        "error_line": "shape mismatch",
        "error_where": "transformers/models/m/modeling_m.py:2 (raised in torch/_ops.py:2)",
    }


def test_unwraps_the_trace_error_to_the_original_exception():
    original = _raise_from("/v/site-packages/transformers/configuration_x.py")
    try:
        try:
            raise original
        except ValueError:
            raise TargetError("hf:x: ValueError: bad config") from None
    except TargetError as wrapped:
        fields = _error_fields(wrapped)
    assert (fields["error_class"], fields["error_line"]) == ("ValueError", "bad config")
    assert fields["error_where"] == "transformers/configuration_x.py:2"


def test_a_plain_exception_raised_while_handling_another_is_not_unwrapped():
    try:
        try:
            raise TargetError("first")
        except TargetError:
            raise KeyError("second") from None
    except KeyError as err:
        assert _error_fields(err)["error_class"] == "KeyError"
