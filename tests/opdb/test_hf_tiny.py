"""Tiny configs derived from each transformers config class's own defaults (configs only: no model is built
here; building and stepping every architecture is the fleet's job, tests/fleet)."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from neuron_migrate.opdb import hf_tiny

transformers = pytest.importorskip("transformers")


def test_a_llama_keeps_its_shape_at_tiny_sizes():
    config = hf_tiny.tiny_config("llama")
    assert (config.hidden_size, config.num_attention_heads, config.num_hidden_layers) == (64, 4, 2)
    assert config.head_dim * config.num_attention_heads == config.hidden_size  # computed by the class
    assert config.num_key_value_heads == 4  # the class default: one per head
    assert config.intermediate_size == 176  # 11008 scaled with hidden 4096 -> 64, a multiple of 8
    assert (config.vocab_size, config.max_position_embeddings) == (256, 128)
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (None, 1, 2)


def test_fixed_sizes_keep_the_config_consistent():
    # the 70B example of the README: values the class computes (head_dim) follow the given sizes
    config = hf_tiny.tiny_config(
        "llama",
        {
            "hidden_size": 8192,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "num_hidden_layers": 80,
            "intermediate_size": 28672,
        },
    )
    assert (config.head_dim, config.num_key_value_heads, config.num_hidden_layers) == (128, 8, 80)


def test_grouped_query_attention_stays_grouped_and_divides():
    config = hf_tiny.tiny_config("mistral")  # 32 heads, 8 KV heads by default
    assert config.num_attention_heads % config.num_key_value_heads == 0
    assert 1 <= config.num_key_value_heads < config.num_attention_heads


def test_indexer_heads_are_head_counts():
    # kolibri1_1's config class checks 1 <= index_num_heads <= query heads per key/value head
    config = hf_tiny.tiny_config("kolibri1_1")
    heads_per_kv = config.num_attention_heads // config.num_key_value_heads
    assert 1 <= config.index_num_heads <= heads_per_kv


def test_mla_head_dims_scale_together():
    config = hf_tiny.tiny_config("deepseek_v3")
    assert (config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim) == (16, 8, 16)
    assert (config.kv_lora_rank, config.q_lora_rank) == (64, 192)
    assert config.num_key_value_heads == config.num_attention_heads == 4
    assert config.n_routed_experts >= config.num_experts_per_tok
    assert config.first_k_dense_replace == 1 < config.num_hidden_layers  # one dense layer, then MoE ones


def test_every_kind_of_layer_is_kept_and_per_layer_lists_follow():
    config = hf_tiny.tiny_config("qwen3_next")  # linear attention x3 then full attention, by default
    assert set(config.layer_types) == {"linear_attention", "full_attention"}
    assert len(config.layer_types) == config.num_hidden_layers == 2
    gemma3n = hf_tiny.tiny_config("gemma3n_text")  # per-layer widths and KV-sharing layers
    assert len(gemma3n.intermediate_size) == len(gemma3n.layer_types) == gemma3n.num_hidden_layers
    assert 0 < gemma3n.num_kv_shared_layers < gemma3n.num_hidden_layers
    assert set(gemma3n.layer_types[: -gemma3n.num_kv_shared_layers]) == set(gemma3n.layer_types)


def test_composite_configs_shrink_each_tower_and_keep_special_tokens_inside():
    config = hf_tiny.tiny_config("gemma3")
    assert config.text_config.hidden_size == 64 and config.vision_config.hidden_size == 64
    assert config.vision_config.image_size == max(2 * config.vision_config.patch_size, hf_tiny.IMAGE)
    assert (
        hf_tiny.RESERVED_IDS
        and config.text_config.vocab_size - hf_tiny.RESERVED_IDS
        <= config.image_token_index
        < config.text_config.vocab_size
    )


def test_widths_equal_by_default_stay_equal():
    # dots3_note validates that its adapter's input size equals the vision hidden size (both 1536 by default)
    config = hf_tiny.tiny_config("dots3_note")
    vision = config.vision_config
    assert vision.hidden_size == 64 and getattr(vision, "adapter_input_size", 64) == vision.hidden_size


def test_heterogeneous_per_layer_values_follow_the_kept_layers():
    config = hf_tiny.tiny_config("dots3_note_text")  # per-layer heads and nope dims, keys like "02"
    sliding = config.per_layer_config["sliding_attention"]
    assert sliding.head_dim == sliding.qk_nope_head_dim + sliding.qk_rope_head_dim
    assert sliding.num_attention_heads <= 4


def test_overrides_are_genuine_exceptions_each_with_its_why():
    data = json.loads((resources.files("neuron_migrate.opdb") / "hf_overrides.json").read_text())
    explained = {name.strip() for key in data["_why"] for name in key.split("/")}
    entries = {k for k in data if not k.startswith("_")}
    assert entries and entries <= explained, entries - explained
    assert len(entries) <= 20  # the derivation does the rest; a growing table is a smell
    for model_type in entries:
        assert model_type in transformers.CONFIG_MAPPING, model_type
