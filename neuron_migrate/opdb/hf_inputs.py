"""The model and the inputs of one step for a tiny transformers architecture (configs: `opdb.hf_tiny`).

`trace --hf MODEL_TYPE` (through `opdb.tracer.targets.build_hf`) and every `fleet hf` task build here, so a
fleet entry is the model `trace --hf` traces, with the task's head. Inputs follow the model's main input:
token ids that avoid the special tokens (with the same ids as labels), pixel values with class labels, one
second of 16 kHz audio or log-mel features of the length the encoder expects, with a few label tokens.
"""

from __future__ import annotations

from typing import Any

from neuron_migrate.opdb.hf_tiny import BATCH, RESERVED_IDS, VOCAB, tiny_config


def trace_auto_class(model_type: str) -> str:
    """The Auto class `trace --hf MODEL_TYPE` builds: seq2seq, else causal LM, else the bare model."""
    from transformers.models.auto import modeling_auto as auto

    if model_type in auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return "AutoModelForSeq2SeqLM"
    if model_type in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return "AutoModelForCausalLM"
    return "AutoModel"


def build(model_type: str, overrides: dict[str, Any], device: Any, auto_class: str | None = None) -> tuple:
    """(model, inputs) of a tiny random-weight `model_type` built by `auto_class` (default: what `trace --hf`
    picks) under `device`, with inputs for one step (labels too, unless it is the bare model)."""
    import torch
    import transformers

    auto_class = auto_class or trace_auto_class(model_type)
    factory = getattr(transformers, auto_class)
    model_cls, config = _model_class(factory, tiny_config(model_type, overrides))
    with torch.device(device):
        model = model_cls._from_config(config) if model_cls is not None else factory.from_config(config)
        inputs = step_inputs(model, config, with_labels=auto_class != "AutoModel")
    return model, inputs


def _model_class(factory: Any, config: Any) -> tuple[Any, Any]:
    """(model class, config) when the Auto class cannot pick the class itself: it takes a sub-config of the
    composite (musicgen's causal LM is its decoder), or the mapping lists several; else (None, config)."""
    try:
        model_cls = factory._model_mapping[type(config)]
    except (KeyError, AttributeError):
        return None, config
    if isinstance(model_cls, (list, tuple)):
        # several classes for one config (DeiT with and without teacher): the Auto class picks by the config's
        # `architectures`, which a config built from defaults lacks; the first is the one the mapping names
        return model_cls[0], config
    expected = getattr(model_cls, "config_class", None)
    if not isinstance(expected, type) or isinstance(config, expected):
        return None, config
    for key in getattr(type(config), "sub_configs_defaults", None) or {}:
        sub = getattr(config, key, None)
        if isinstance(sub, expected):
            return model_cls, sub
    return None, config


def step_inputs(model: Any, config: Any, with_labels: bool) -> dict[str, Any]:
    """Inputs for the model's main input (token ids, pixel values, raw audio or audio features)."""
    main = getattr(model, "main_input_name", "input_ids")
    if main == "input_ids":
        inputs = sequence_inputs(config, with_labels)
        if _image_prefix(model, config):
            inputs["pixel_values"] = image_inputs(config)["pixel_values"]
        return inputs
    if main == "pixel_values":
        inputs = image_inputs(config)
        return inputs if with_labels else {"pixel_values": inputs["pixel_values"]}
    if main in ("input_values", "input_features"):
        return audio_inputs(config, main, with_labels)
    raise ValueError(f"the fleet cannot make inputs for a model whose main input is {main!r}")


def _image_prefix(model: Any, config: Any) -> bool:
    """A text model that reads its image as a prefix rather than at image tokens (GIT): its loss counts the
    image's positions, so a text-only step does not line up."""
    import inspect

    takes_pixels = "pixel_values" in inspect.signature(model.forward).parameters
    tokens = any(getattr(config, name, None) is not None for name in ("image_token_id", "image_token_index"))
    return takes_pixels and getattr(config, "vision_config", None) is not None and not tokens


def audio_inputs(config: Any, main: str, with_labels: bool) -> dict[str, Any]:
    """One second of random 16 kHz audio (`input_values`), or random log-mel features (`input_features`) of
    the length the encoder expects; labels are a few token ids of the text vocabulary."""
    import torch

    batch = BATCH[0]
    if main == "input_values":
        inputs = {"input_values": torch.randn(batch, 16000)}
    elif getattr(config, "num_mel_bins", None) and getattr(config, "max_source_positions", None):
        inputs = {"input_features": torch.randn(batch, config.num_mel_bins, 2 * config.max_source_positions)}
    elif getattr(config, "input_feat_per_channel", None):
        width = config.input_feat_per_channel * (getattr(config, "input_channels", 1) or 1)
        inputs = {"input_features": torch.randn(batch, 64, width)}
    else:
        raise ValueError("the fleet cannot tell the audio feature shape of this config")
    if with_labels:
        text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
        vocab = getattr(text, "vocab_size", None) or VOCAB
        inputs["labels"] = torch.randint(3, max(4, min(vocab, VOCAB) - 1), (batch, 4))
    return inputs


def input_ids(config: Any, generator: Any = None) -> Any:
    """A BATCH of token ids that avoids the special tokens (0..2 and the reserved top of the vocabulary)."""
    import torch

    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    vocab = getattr(text, "vocab_size", None) or VOCAB
    high = vocab - RESERVED_IDS if vocab > RESERVED_IDS + 8 else vocab
    return torch.randint(3, high, BATCH, generator=generator)


def sequence_inputs(config: Any, with_labels: bool) -> dict[str, Any]:
    """Token ids (and the same ids as labels) for a text model; audio-token decoders (musicgen) take one row
    per codebook and labels of shape (batch, sequence, codebooks)."""
    import torch

    ids = input_ids(config)
    codebooks = getattr(config, "num_codebooks", None)
    if isinstance(codebooks, int) and codebooks > 1:
        labels = torch.stack([input_ids(config) for _ in range(codebooks)])
        return {
            "input_ids": labels.permute(1, 0, 2).reshape(-1, BATCH[1]),
            **({"labels": labels.permute(1, 2, 0)} if with_labels else {}),
        }
    return {"input_ids": ids, "labels": ids} if with_labels else {"input_ids": ids}


def image_inputs(config: Any) -> dict[str, Any]:
    """Random pixel values at the tiny image size, with class labels."""
    import torch

    vision = getattr(config, "vision_config", None) or config
    size = getattr(vision, "image_size", None) or 32
    size = (
        size
        if isinstance(size, int)
        else size[0]
        if isinstance(size, (list, tuple))
        else size.get("height", 32)
    )
    channels = getattr(vision, "num_channels", None) or 3
    labels = torch.randint(0, max(1, int(getattr(config, "num_labels", 2) or 2)), (BATCH[0],))
    return {"pixel_values": torch.randn(BATCH[0], channels, size, size), "labels": labels}
