"""Architecture selection and the resumable cache (no torch)."""

from __future__ import annotations

import pytest

from neuron_migrate.errors import UsageError
from neuron_migrate.fleet.cache import FleetCache, entry_key
from neuron_migrate.fleet.enumerate import Architecture, parse_models, select

MAPPINGS = {
    "causal-lm": {"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel", "bart": "BartForCausalLM"},
    "seq2seq": {"t5": "T5ForConditionalGeneration", "bart": "BartForConditionalGeneration"},
    "masked-lm": {"bert": "BertForMaskedLM"},
}


def test_whole_task_is_every_architecture_of_its_mapping_sorted():
    assert [a.model_type for a in select(MAPPINGS, "causal-lm", ())] == ["bart", "gpt2", "llama"]


def test_models_keep_their_order_and_pick_a_task_per_model():
    chosen = select(MAPPINGS, "causal-lm", parse_models("llama, t5,,llama,bart"))
    assert chosen == [
        Architecture("llama", "causal-lm", "LlamaForCausalLM"),
        Architecture("t5", "seq2seq", "T5ForConditionalGeneration"),
        Architecture("bart", "causal-lm", "BartForCausalLM"),
    ]
    assert select(MAPPINGS, "seq2seq", ("bart",))[0].architecture == "BartForConditionalGeneration"


def test_unknown_model_and_task_are_one_line_usage_errors():
    with pytest.raises(UsageError, match="did you mean llama"):
        select(MAPPINGS, "causal-lm", ("lama",))
    with pytest.raises(UsageError, match="--task vision: use one of causal-lm, seq2seq, masked-lm"):
        select(MAPPINGS, "vision", ())


def test_every_key_part_changes_the_key():
    base = {
        "model_type": "llama",
        "task": "causal-lm",
        "mode": "train",
        "device": "neuron",
        "config": {"hidden_size": 64},
        "opdb": ["v1", "d1"],
        "torch": "2.13",
        "transformers": "5.24",
        "torch-neuronx": None,
        "neuron-migrate": "0.1.0",
    }
    keys = {entry_key(base)}
    for part, other in [
        ("model_type", "gpt2"),
        ("task", "seq2seq"),
        ("mode", "inference"),
        ("device", "x"),
        ("config", {"hidden_size": 32}),
        ("opdb", ["v2", "d1"]),
        ("opdb", ["v1", "d2"]),
        ("torch", "2.14"),
        ("transformers", "5.25"),
        ("torch-neuronx", "2.9"),
        ("neuron-migrate", "0.2.0"),
    ]:
        keys.add(entry_key({**base, part: other}))
    assert len(keys) == 12
    assert entry_key(dict(reversed(list(base.items())))) == entry_key(base)


def test_cache_round_trip_skips_harness_outcomes_and_survives_junk(tmp_path):
    cache = FleetCache(tmp_path)
    cache.put("k1", {"key": "k1", "outcome": "ok", "model_type": "llama"})
    cache.put("k2", {"key": "k2", "outcome": "timeout"})
    cache.put("k3", {"key": "k3", "outcome": "memory"})  # deterministic: cached with its bound by the runner
    cache.put("k5", {"key": "k5", "outcome": "crash"})
    assert cache.get("k1")["model_type"] == "llama"
    assert cache.get("k2") is None and cache.get("k3")["outcome"] == "memory"
    assert cache.get("k5") is None
    (tmp_path / "fleet" / "k4.json").write_text("{not json")
    assert cache.get("k4") is None
    cache.put_mappings("5.24", MAPPINGS)
    assert cache.get_mappings("5.24") == MAPPINGS and cache.get_mappings("5.25") is None
    off = FleetCache(None)
    off.put("k1", {"key": "k1", "outcome": "ok"})
    assert off.get("k1") is None
