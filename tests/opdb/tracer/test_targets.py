"""Target parsing: pure Python, no torch and no device in this process."""

from __future__ import annotations

import pytest

from neuron_migrate.errors import UsageError
from neuron_migrate.opdb.hf_tiny import HF_OVERRIDES
from neuron_migrate.opdb.tracer.targets import TargetSpec, hf_config_kwargs, parse_hf_config


def test_function_targets_module_and_path_forms(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert TargetSpec.parse("pkg.mod:build") == TargetSpec("function", "pkg.mod:build")
    assert TargetSpec.parse("src/file.py:build").kind == "function"


def test_script_target_keeps_its_arguments(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print(1)\n")
    spec = TargetSpec.parse("train.py", ("--steps", "2"))
    assert (spec.kind, spec.args, spec.label) == ("script", ("--steps", "2"), "train.py --steps 2")


@pytest.mark.parametrize(
    "target, args, hf, hf_config, words",
    [
        (None, (), None, None, "nothing to trace"),
        ("missing.py", (), None, None, "no such script"),
        ("pkg.mod:build", ("--x",), None, None, "only apply to scripts"),
        ("pkg.mod:build", (), "llama", None, "not both"),
        (None, (), None, "hidden_size=8", "only applies with --hf"),
        ("not a target", (), None, None, "is not a target"),
    ],
)
def test_bad_targets_are_one_line_usage_errors(tmp_path, monkeypatch, target, args, hf, hf_config, words):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=words) as err:
        TargetSpec.parse(target, args, hf, hf_config)
    assert "\n" not in str(err.value)


def test_hf_config_values_are_typed():
    parsed = parse_hf_config("hidden_size=8192, rope_theta=5e5,tie_word_embeddings=false,act=gelu,x=none")
    assert parsed == {
        "hidden_size": 8192,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "act": "gelu",
        "x": None,
    }


@pytest.mark.parametrize("bad", ["hidden_size", "=3", "a b=1"])
def test_hf_config_rejects_malformed_items(bad):
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_hf_config(bad)


def test_hf_overrides_are_the_fixed_values_and_user_wins():
    # the rest of a tiny config is derived from the config class's defaults (tests/opdb/test_hf_tiny.py)
    kwargs = hf_config_kwargs("reformer", {"is_decoder": False, "hidden_size": 128})
    assert kwargs["is_decoder"] is False and kwargs["hidden_size"] == 128
    assert kwargs["axial_pos_shape"] == HF_OVERRIDES["reformer"]["axial_pos_shape"]
    assert hf_config_kwargs("llama", {"num_key_value_heads": None}) == {"num_key_value_heads": None}
