"""Tiny transformers configs derived from each config class's own defaults (the model and step inputs:
`hf_inputs`).

`trace --hf MODEL_TYPE` and every `fleet` task build their model here, so both always build the same one.

A config class's defaults describe a real checkpoint (a 7B Llama, a 671B DeepSeek). The tiny config keeps
its shape and scales its sizes down *consistently*, so that the code paths of the architecture are the ones
that run:

- widths (hidden, intermediate, expert and projector sizes) scale with hidden -> 64, rounded to multiples of
  8; a width equal to a width elsewhere in the config tree (a vision tower's `out_hidden_size` and the text
  model's `hidden_size`) stays equal to it;
- per-head sizes (head_dim, MLA's rope/nope/value head dims and lora ranks, rotary dims) scale with the
  largest head size -> 16, so heads x head dim = hidden and rope dim < head dim hold as they did;
- head counts go to 4, key/value heads keep dividing them (1 stays 1, equal stays equal);
- layers go to 2, or to as many as it takes to keep one layer of every distinct kind (every per-layer list,
  `layer_types` and friends, and every list of layer indices is resized with the layer count);
  patterns with a period (every n-th layer is global) get a period that fits;
- experts go to 4 (top-k <= experts, groups dividing them); vocabularies to 256 with the special token ids
  moved inside; position limits to 128; image sizes to a few patches;
- composite configs (text + vision + audio) are shrunk recursively, each sub-config from its own class.

Only values the class gives a default for are touched: a value the class computes from others (head_dim =
hidden // heads when it defaults to None) is left for the class to compute, so
`--hf-config hidden_size=8192,...` (fixed values) still gives a consistent model. `opdb/hf_overrides.json`
holds the genuine exceptions on top.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from importlib import resources
from typing import Any

HIDDEN, HEADS, HEAD_DIM, LAYERS, EXPERTS, TOP_K = 64, 4, 16, 2, 4, 2
VOCAB, POSITIONS, MAX_LAYERS, IMAGE = 256, 128, 6, 64
BATCH = (2, 16)  # token ids per step: batch x sequence length
RESERVED_IDS = 16  # the top of the vocabulary holds special tokens; inputs never draw from it
_PLAIN_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}

# Key classes, matched on the config field's name. Order matters: the first class that matches wins.
_LAYER_KEYS = re.compile(
    r"^(num_hidden_layers|num_layers|n_layers?|depth|encoder_layers|decoder_layers|"
    r"num_decoder_layers|num_encoder_layers|num_hidden_layers_text)$"
)
_HEAD_DIM_KEYS = re.compile(
    r"^(head_dim|.*_head_dim|d_kv|kv_channels|attention_head_dim|head_size|dim_head|"
    r"d_head|rotary_dim|rope_dim|.*_lora_rank|mamba_d_head|attention_head_size)$"
)
_HEAD_COUNT_KEYS = re.compile(
    r"^(num_attention_heads|num_key_value_heads|n_head|n_heads|num_heads|n_head_kv|"
    r"num_kv_heads|.*_attention_heads|.*_num_attention_heads|.*_num_key_value_heads|"
    r"index_n_heads|index_num_heads|linear_num_key_heads|linear_num_value_heads|mamba_n_heads|"
    r"n_mamba_heads|multi_query_group_num|num_key_value_groups)$"
)
_WIDTH_KEYS = re.compile(
    r"^(hidden_size|d_model|n_embd|dim|embed_dim|hidden_dim|word_embed_proj_dim|"
    r"embedding_size|d_embed|model_dim|.*intermediate_size.*|.*_hidden_size|"
    r"hidden_size_.*|.*ffn_dim|ffn_hidden_size|d_ff|dim_ff|dff|n_inner|"
    r"attention_hidden_size|projector_.*_dim|vision_output_dim|text_hidden_size|"
    r"output_dim|proj_dim|projection_dim|conv_dim|emb_dim|hidden_sizes|embed_dims|.*_(in|out)_dim|.*_(input|output)_size)$"
)
_EXPERT_KEYS = re.compile(
    r"^(num_experts|num_local_experts|n_routed_experts|moe_num_experts|num_experts_total|"
    r"num_routed_experts)$"
)
_TOP_K_KEYS = re.compile(
    r"^(num_experts_per_tok|num_experts_per_token|moe_topk|moe_k|top_k_experts|"
    r"experts_per_token|num_selected_experts)$"
)
_SHARED_EXPERT_KEYS = re.compile(r"^(n_shared_experts|num_shared_experts|moe_num_shared_experts)$")
_DENSE_PREFIX_KEYS = re.compile(r"^(first_k_dense_replace|num_dense_layers|moe_layer_start_index)$")
_PERIOD_KEYS = re.compile(
    r"^(sliding_window_pattern|global_attn_every_n_layers|no_rope_layer_interval|"
    r"attn_layer_period|layer_group_size|decoder_sparse_step|moe_layer_interval|"
    r"n_layers_per_attn_res_block|expert_layer_period)$"
)
_OFFSET_KEYS = re.compile(r"^(attn_layer_offset|expert_layer_offset)$")
_VOCAB_KEYS = re.compile(r"^(.*vocab_size.*|.*_vocab|codebook_size)$")
_POSITION_KEYS = re.compile(
    r"^(max_position_embeddings|n_positions|n_ctx|max_seq_len|max_sequence_length|"
    r"original_max_position_embeddings|max_source_positions|max_target_positions)$"
)
_TOKEN_ID_KEYS = re.compile(r"^.*_token_(id|index|ids)$")
_IMAGE_TOKEN_COUNT_KEYS = re.compile(
    r"^(mm_tokens_per_image|image_seq_length|num_image_tokens|"
    r"vision_soft_tokens_per_image)$"
)
_KEEP = {"type_vocab_size"}  # tiny already, and a count of segment types rather than a size


def load_overrides() -> dict[str, dict[str, Any]]:
    """The genuine per-model_type exceptions, `opdb/hf_overrides.json` (keys starting with `_` are notes)."""
    text = (resources.files("neuron_migrate.opdb") / "hf_overrides.json").read_text(encoding="utf-8")
    return {k: v for k, v in json.loads(text).items() if not k.startswith("_")}


HF_OVERRIDES: dict[str, dict[str, Any]] = load_overrides()


def requested(model_type: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The fixed values of a tiny `model_type`: its `hf_overrides.json` entry with the user's on top. With the
    transformers version and this module's source they determine the config (the fleet cache keys on them)."""
    return {**HF_OVERRIDES.get(model_type, {}), **overrides}


# --- reading a config class's defaults ------------------------------------------------------------------


def _field_defaults(cls: type) -> dict[str, Any]:
    """Field -> default as the class declares it (None where the class computes the value itself)."""
    found: dict[str, Any] = {}
    for item in dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ():
        if item.default is not dataclasses.MISSING:
            found[item.name] = item.default
        elif item.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            try:
                found[item.name] = item.default_factory()  # type: ignore[misc]
            except Exception:
                continue
    return found


def _resolved(config: Any) -> dict[str, Any]:
    """A built config's values, sub-configs as dicts (per-layer configs allowed to be read globally)."""
    with contextlib.suppress(Exception):
        config.allow_global_per_layer_attribute_access = True
    try:
        values = config.to_dict()
    except Exception:
        return {k: getattr(config, k, None) for k in _field_defaults(type(config))}
    for key, value in values.items():
        if isinstance(value, list):  # to_dict may write a legacy spelling of a list; the attribute is current
            with contextlib.suppress(Exception):
                values[key] = list(getattr(config, key))
    return values


def _sub_config_classes(cls: type) -> dict[str, tuple[type, dict[str, Any]]]:
    """Sub-config key -> (its config class, the defaults the composite gives it), for composite configs."""
    specs = getattr(cls, "sub_configs_defaults", None) or {}
    found = {}
    for key, spec in specs.items():
        sub = getattr(spec, "config_class", spec)
        model_type = getattr(spec, "model_type", None)
        if getattr(sub, "__name__", "") == "AutoConfig" and model_type:
            from transformers import CONFIG_MAPPING

            sub = CONFIG_MAPPING[model_type]
        if isinstance(sub, type):
            found[key] = (sub, dict(getattr(spec, "init_kwargs", None) or {}))
    return found


# --- scaling rules --------------------------------------------------------------------------------------


def _even(value: float) -> int:
    return max(2, round(value / 2) * 2)


def _eighth(value: float) -> int:
    return max(8, round(value / 8) * 8)


def _divisor_at_most(limit: int, of: int) -> int:
    return max(d for d in range(1, of + 1) if of % d == 0 and d <= max(1, limit))


@dataclasses.dataclass
class _Scale:
    """Factors of one (sub-)config, and the map of hidden sizes (default -> tiny) shared by the config
    tree."""

    width: float
    head: float
    heads_from: int
    heads_to: int
    widths: dict[int, int]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _scale_value(key: str, value: Any, scale: _Scale) -> Any:
    """The tiny value of one scalar field, or `value` itself when no rule applies."""
    if key in _KEEP or not _is_int(value) or value <= 0:
        return value
    if _HEAD_DIM_KEYS.match(key):
        return min(value, _even(value * scale.head))
    if _HEAD_COUNT_KEYS.match(key):
        if value == scale.heads_from:
            return scale.heads_to
        return (
            _divisor_at_most(round(value * scale.heads_to / max(1, scale.heads_from)), scale.heads_to)
            if value < scale.heads_from
            else max(1, round(value * scale.heads_to / max(1, scale.heads_from)))
        )
    if _EXPERT_KEYS.match(key):
        return min(value, EXPERTS)
    if _TOP_K_KEYS.match(key):
        return min(value, TOP_K)
    if _SHARED_EXPERT_KEYS.match(key) or _DENSE_PREFIX_KEYS.match(key):
        return min(value, 1)
    if _PERIOD_KEYS.match(key):
        return min(value, LAYERS)
    if _OFFSET_KEYS.match(key):
        return min(value, LAYERS - 1)
    if _VOCAB_KEYS.match(key):
        return min(value, VOCAB)
    if _POSITION_KEYS.match(key):
        return min(value, POSITIONS)
    if key == "n_group":
        return min(value, 2)
    if key == "topk_group":
        return min(value, 1)
    if _WIDTH_KEYS.match(key):
        # a width equal to a hidden size of the tree (a projector into the text model) becomes that hidden
        # size
        return scale.widths.get(value, min(value, _eighth(value * scale.width)))
    return value


def _head_size(values: dict[str, Any], hidden: Any = None, heads: Any = None) -> int | None:
    """The largest per-head size of a config: what HEAD_DIM replaces."""
    sizes = [
        v
        for k, v in values.items()
        if _is_int(v)
        and v > 0
        and _HEAD_DIM_KEYS.match(k)
        and not k.endswith("_lora_rank")
        and k not in ("rotary_dim", "rope_dim", "qk_head_dim")
    ]
    hidden = values.get("hidden_size") if hidden is None else hidden
    heads = values.get("num_attention_heads") if heads is None else heads
    if not sizes and _is_int(hidden) and _is_int(heads) and heads > 0:
        sizes.append(hidden // heads)
    return max(sizes) if sizes else None


def _per_layer(values: dict[str, Any], layers: int) -> tuple[dict[str, list], dict[str, list]]:
    """Lists with one entry per layer, and lists of layer indices (ints below `layers`, named for layers)."""
    per_layer, indices = {}, {}
    for key, value in values.items():
        if not isinstance(value, (list, tuple)) or not value:
            continue
        if len(value) == layers and layers > 1:
            per_layer[key] = list(value)
        elif "layer" in key and all(_is_int(v) and 0 <= v < layers for v in value):
            indices[key] = list(value)
    return per_layer, indices


def _kind(per_layer: dict[str, list], i: int) -> str:
    return json.dumps([per_layer[k][i] for k in sorted(per_layer)], default=str)


def _representatives(per_layer: dict[str, list], indices: dict[str, list], layers: int) -> list[int]:
    """Layer numbers to keep: the first layer of every distinct kind, padded with the next ones to LAYERS."""
    seen: dict[str, int] = {}
    for i in range(layers):
        kind = json.dumps(
            [per_layer[k][i] for k in sorted(per_layer)] + [i in indices[k] for k in sorted(indices)],
            default=str,
        )
        seen.setdefault(kind, i)
    keep = sorted(seen.values())[:MAX_LAYERS]
    for i in range(layers):
        if len(keep) >= min(LAYERS, layers):
            break
        if i not in keep:
            keep = sorted([*keep, i])
    return keep


def _layer_count_key(values: dict[str, Any]) -> str | None:
    for key in ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "depth"):
        if _is_int(values.get(key)):
            return key
    return None


def shrink(
    cls: type,
    fixed: dict[str, Any],
    widths: dict[int, int] | None = None,
    defaults: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Tiny keyword arguments for config class `cls`: its declared defaults (with the `defaults` a composite
    config gives it) scaled down, `fixed` kept."""
    widths = {} if widths is None else widths
    defaults = dict(defaults or {})
    declared = {**_field_defaults(cls), **defaults}
    try:
        base = _resolved(cls(**defaults))
    except Exception:
        base = dict(declared)
    hidden = next(
        (
            base[k]
            for k in ("hidden_size", "d_model", "n_embd", "dim", "embed_dim")
            if _is_int(base.get(k)) and base[k] > 0
        ),
        None,
    )
    heads = next(
        (
            base[k]
            for k in (
                "num_attention_heads",
                "n_head",
                "num_heads",
                "n_heads",
                "encoder_attention_heads",
                "decoder_attention_heads",
            )
            if _is_int(base.get(k)) and base[k] > 0
        ),
        HEADS,
    )
    head = _head_size(base, hidden, heads)
    scale = _Scale(
        width=min(1.0, HIDDEN / hidden) if hidden else 1.0,
        head=min(1.0, HEAD_DIM / head) if head else 1.0,
        heads_from=heads,
        heads_to=min(heads, HEADS),
        widths=widths,
    )
    if hidden:
        widths.setdefault(hidden, min(hidden, HIDDEN))  # the map holds hidden sizes only
    kwargs: dict[str, Any] = {}
    for key, value in declared.items():
        if key in fixed or value is None:
            continue
        if (
            isinstance(value, (list, tuple))
            and value
            and all(_is_int(v) for v in value)
            and _WIDTH_KEYS.match(key)
        ):
            kwargs[key] = type(value)(
                _scale_value(key, v, scale) for v in value
            )  # conv stacks: one per stage
            continue
        new = _scale_value(key, value, scale)
        if new != value:
            kwargs[key] = new
    _shrink_layers(base, declared, kwargs, fixed)
    _shrink_images(base, declared, kwargs, fixed)
    if (
        "num_key_value_heads" in declared
        and base.get("num_key_value_heads") is None
        and _is_int(kwargs.get("num_attention_heads"))
        and "num_key_value_heads" not in fixed
    ):
        kwargs["num_key_value_heads"] = kwargs[
            "num_attention_heads"
        ]  # None means one per head; not all say so
    if (
        "head_dim" in declared
        and base.get("head_dim") is None
        and "head_dim" not in fixed
        and _is_int(kwargs.get("hidden_size"))
        and _is_int(kwargs.get("num_attention_heads"))
    ):
        # None means hidden // heads; some classes leave that to the model, which then divides by None
        kwargs["head_dim"] = kwargs["hidden_size"] // kwargs["num_attention_heads"]
    _keep_head_sums(base, kwargs, fixed)
    # the text model first: its hidden size is what projectors of the other towers must produce
    for key, (sub_cls, sub_defaults) in sorted(
        _sub_config_classes(cls).items(), key=lambda kv: "text" not in kv[0]
    ):
        if key in fixed and not isinstance(fixed[key], dict):
            continue
        sub_fixed = fixed.get(key) if isinstance(fixed.get(key), dict) else {}
        sub = shrink(sub_cls, sub_fixed, widths, sub_defaults)
        kwargs[key] = {**sub, **sub_fixed}
    _shrink_token_ids(base, declared, kwargs, fixed)
    return {**kwargs, **{k: v for k, v in fixed.items() if not isinstance(v, dict) or k not in kwargs}}


def _shrink_layers(
    base: dict[str, Any], declared: dict[str, Any], kwargs: dict[str, Any], fixed: dict[str, Any]
) -> None:
    """Set the layer count(s) and resize every per-layer list and index list with them."""
    key = _layer_count_key(base)
    layers = base.get(key) if key else None
    if not _is_int(layers) or layers <= 0:
        for other in base:
            if _LAYER_KEYS.match(other) and _is_int(base[other]) and other not in fixed:
                kwargs[other] = min(base[other], LAYERS)
        return
    per_layer, indices = _per_layer(base, layers)
    keep = _representatives(per_layer, indices, layers) if key not in fixed else list(range(fixed[key]))
    count = fixed.get(key, len(keep))
    for other in base:
        if _LAYER_KEYS.match(other) and _is_int(base[other]) and other not in fixed:
            kwargs[other] = min(base[other], count) if other != key else count
    if key in fixed:
        return
    shared = base.get("num_kv_shared_layers")
    if _is_int(shared) and shared > 0 and "num_kv_shared_layers" not in fixed:
        # the last `shared` layers reuse the key/value states of the last earlier layer of their kind: keep
        # one layer of every kind that computes them, then the same kinds again sharing them
        own = [i for i in keep if i < layers - shared] or keep
        keep = own + [
            next((j for j in range(layers - shared, layers) if _kind(per_layer, j) == _kind(per_layer, i)), i)
            for i in own
        ]
        kwargs["num_kv_shared_layers"] = len(own)
        kwargs[key] = count = len(keep)
    if isinstance(base.get("per_layer_config"), dict) and "per_layer_config" not in fixed:
        # heterogeneous configs ({layer index: that layer's own values}): renumbered with the kept layers
        kwargs["per_layer_config"] = _shrink_per_layer_configs(base["per_layer_config"], keep, base)
    for name, values in per_layer.items():
        if name in fixed or name not in declared:
            continue
        picked = [values[i] for i in keep]
        if _WIDTH_KEYS.match(name):  # one width per layer (gemma3n's intermediate sizes): scale each
            scale = _Scale(
                width=HIDDEN / max(HIDDEN, base.get("hidden_size") or HIDDEN),
                head=1.0,
                heads_from=1,
                heads_to=1,
                widths={},
            )
            picked = [_scale_value(name, v, scale) for v in picked]
        kwargs[name] = picked
    for name, values in indices.items():
        if name not in fixed and name in declared:
            kwargs[name] = [keep.index(i) for i in values if i in keep]


def _keep_head_sums(base: dict[str, Any], kwargs: dict[str, Any], fixed: dict[str, Any]) -> None:
    """MLA: a head size defined as nope + rope head dims (query/key heads) stays that sum."""
    nope, rope = base.get("qk_nope_head_dim"), base.get("qk_rope_head_dim")
    if not (_is_int(nope) and _is_int(rope)):
        return
    total = kwargs.get("qk_nope_head_dim", nope) + kwargs.get("qk_rope_head_dim", rope)
    for key in ("head_dim", "qk_head_dim", "swa_head_dim"):
        if key not in fixed and base.get(key) == nope + rope:
            kwargs[key] = total


def _shrink_per_layer_configs(original: dict, keep: list[int], base: dict[str, Any]) -> dict[str, Any]:
    """A heterogeneous config's per-layer values, renumbered to the kept layers and scaled like the rest."""
    hidden, heads = base.get("hidden_size"), base.get("num_attention_heads")
    scale = _Scale(
        width=HIDDEN / hidden if _is_int(hidden) and hidden > HIDDEN else 1.0,
        head=min(1.0, HEAD_DIM / (_head_size(base) or HEAD_DIM)),
        heads_from=heads if _is_int(heads) else HEADS,
        heads_to=HEADS,
        widths={},
    )
    by_layer = {int(k): v for k, v in original.items() if str(k).isdigit()}  # keys may be "02" or 2
    shrunk = {}
    for new, old in enumerate(keep):
        values = by_layer.get(old)
        if isinstance(values, dict):
            shrunk[new] = {k: _scale_value(k, v, scale) for k, v in values.items()}
    return shrunk


def _shrink_token_ids(
    base: dict[str, Any], declared: dict[str, Any], kwargs: dict[str, Any], fixed: dict[str, Any]
) -> None:
    """Move special token ids inside the tiny vocabulary: pad/bos/eos to 0/1/2, the others to the top
    slots."""
    text = kwargs.get("text_config") if isinstance(kwargs.get("text_config"), dict) else {}
    vocab = kwargs.get(
        "vocab_size", text.get("vocab_size", base.get("vocab_size"))
    )  # a composite's: its text's
    if not _is_int(vocab):
        return
    top = iter(range(vocab - 1, vocab - RESERVED_IDS - 1, -1))
    moved: dict[int, int] = {}

    def place(name: str, value: int) -> int:
        if name in _PLAIN_IDS:
            return _PLAIN_IDS[name]
        if value < 3:
            return value
        if value not in moved:
            moved[value] = next(top, vocab - 1)
        return moved[value]

    for name in sorted(base):
        if not _TOKEN_ID_KEYS.match(name) or name in fixed or name not in declared:
            continue
        value = base[name]
        if _is_int(value) and value >= 0:
            kwargs[name] = place(name, value)
        elif isinstance(value, list) and value and all(_is_int(v) and v >= 0 for v in value):
            kwargs[name] = [place(name, v) for v in value]


def _shrink_images(
    base: dict[str, Any], declared: dict[str, Any], kwargs: dict[str, Any], fixed: dict[str, Any]
) -> None:
    """A few patches per image: image_size = 2 x patch_size, and token counts per image to match."""
    patch, image = base.get("patch_size"), base.get("image_size")
    # a few patches, and at least 64 pixels: hierarchical towers (ConvNeXt, Swin) downsample 32x
    if _is_int(patch) and _is_int(image) and "image_size" not in fixed and image > max(2 * patch, IMAGE):
        kwargs["image_size"] = max(2 * patch, IMAGE)
    for name in base:
        if (
            _IMAGE_TOKEN_COUNT_KEYS.match(name)
            and name not in fixed
            and _is_int(base[name])
            and base[name] > 4
        ):
            kwargs[name] = 4


# --- building ---------------------------------------------------------------------------------------------


def tiny_config(model_type: str, overrides: dict[str, Any] | None = None) -> Any:
    """The tiny config of `model_type`: derived defaults, then hf_overrides.json, then `overrides`."""
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]  # KeyError: no such model type
    fixed = requested(model_type, dict(overrides or {}))
    kwargs = shrink(cls, dict(fixed))
    kwargs = {k: v for k, v in kwargs.items() if v is not None or k in fixed}
    config = cls(**kwargs)
    if (
        getattr(config, "is_encoder_decoder", False)
        and getattr(config, "decoder_start_token_id", None) is None
        and "decoder_start_token_id" not in fixed
    ):
        # T5-style classes do not declare it; their checkpoints start decoding at the pad token
        pad = getattr(config, "pad_token_id", None)
        config.decoder_start_token_id = pad if pad is not None else 0
    return config
