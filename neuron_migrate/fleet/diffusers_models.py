"""`fleet diffusers`: tiny random-weight Diffusers models (UNets, DiT-style transformers, VAEs), built from
each model class's own `__init__` defaults scaled down, with one denoising training step or one inference
step.

Scaling follows `opdb.hf_tiny`: channel lists keep their length (every down/up block stays) and start at 32,
group norms use 8 groups, one layer per block, two transformer layers of two heads of 8 (rotary axes resized
to the head), conditioning widths of 32 (a width equal to the inner attention width stays equal to it), and
16 x 16 latents. The step is what training a diffusion model does: the model predicts the noise added to
random latents under a random timestep and conditioning, mean-squared error against that noise; autoencoders
reconstruct their input. Nothing is downloaded: configs come from the class defaults, weights are random.
"""

from __future__ import annotations

import inspect
from typing import Any

# class -> what the step does with it. Only classes the installed diffusers has are traced.
MODELS: dict[str, str] = {
    "UNet2DModel": "denoise",
    "UNet2DConditionModel": "denoise",
    "DiTTransformer2DModel": "denoise",
    "PixArtTransformer2DModel": "denoise",
    "SD3Transformer2DModel": "denoise",
    "FluxTransformer2DModel": "denoise",
    "AutoencoderKL": "reconstruct",
    "AutoencoderTiny": "reconstruct",
    "VQModel": "reconstruct",
}
CHANNELS, GROUPS, HEADS, HEAD_DIM, COND, SIZE, TEXT_TOKENS = 32, 8, 2, 8, 32, 16, 8
_CONDITIONING = (
    "cross_attention_dim",
    "joint_attention_dim",
    "pooled_projection_dim",
    "caption_projection_dim",
    "caption_channels",
    "encoder_hid_dim",
)


def available() -> dict[str, str]:
    """The MODELS the installed diffusers provides (empty without diffusers)."""
    try:
        import diffusers
    except ImportError:
        return {}
    return {name: name for name in MODELS if hasattr(diffusers, name)}


def defaults(cls: type) -> dict[str, Any]:
    """The class's own `__init__` defaults (Diffusers registers every one of them as config)."""
    return {
        name: p.default
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if name != "self" and p.default is not inspect.Parameter.empty
    }


def _even_parts(parts: tuple[int, ...], total: int) -> tuple[int, ...]:
    """Resize rotary axes to even sizes that add up to `total` (the new head size)."""
    scaled = [max(2, round(p * total / sum(parts) / 2) * 2) for p in parts]
    scaled[-1] += total - sum(scaled)
    return tuple(scaled)


def tiny_config(cls: type) -> dict[str, Any]:
    """Tiny keyword arguments for a Diffusers model class, from its defaults."""
    found = defaults(cls)
    kwargs: dict[str, Any] = {}
    for key in ("block_out_channels", "encoder_block_out_channels", "decoder_block_out_channels"):
        value = found.get(key)
        if isinstance(value, (list, tuple)) and value and value[0] > CHANNELS:
            kwargs[key] = tuple(max(GROUPS, round(v * CHANNELS / value[0] / GROUPS) * GROUPS) for v in value)
    for key in ("num_encoder_blocks", "num_decoder_blocks"):
        if isinstance(found.get(key), (list, tuple)):
            kwargs[key] = tuple(min(v, 1) for v in found[key])
    small = {
        "norm_num_groups": GROUPS,
        "layers_per_block": 1,
        "num_layers": 2,
        "num_single_layers": 1,
        "transformer_layers_per_block": 1,
    }
    kwargs.update({k: min(v, found[k]) for k, v in small.items() if isinstance(found.get(k), int)})
    transformer = "patch_size" in found  # DiT-style: attention_head_dim is a size; in UNets it counts heads
    heads, head_dim = found.get("num_attention_heads"), found.get("attention_head_dim")
    inner = heads * head_dim if isinstance(heads, int) and isinstance(head_dim, int) else None
    if transformer and isinstance(heads, int) and isinstance(head_dim, int):
        kwargs.update(num_attention_heads=min(heads, HEADS), attention_head_dim=min(head_dim, HEAD_DIM))
    new_inner = kwargs.get("num_attention_heads", heads or 0) * kwargs.get(
        "attention_head_dim", head_dim or 0
    )
    for key in _CONDITIONING:
        value = found.get(key)
        if isinstance(value, int) and value > COND:
            kwargs[key] = new_inner if inner and value == inner else COND
    if isinstance(found.get("axes_dims_rope"), (list, tuple)):
        kwargs["axes_dims_rope"] = _even_parts(tuple(found["axes_dims_rope"]), kwargs["attention_head_dim"])
    if isinstance(found.get("sample_size"), int) and found["sample_size"] > SIZE and transformer:
        kwargs["sample_size"] = SIZE
    if isinstance(found.get("pos_embed_max_size"), int):
        kwargs["pos_embed_max_size"] = SIZE
    if cls.__name__ == "PixArtTransformer2DModel":
        kwargs["caption_channels"] = COND  # its caption projection is built only when this is set
    return kwargs


def _conditioning_width(config: Any) -> int | None:
    for key in ("joint_attention_dim", "caption_channels", "cross_attention_dim", "encoder_hid_dim"):
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    return None


def step_inputs(model: Any, batch: int = 2) -> tuple[dict[str, Any], Any]:
    """(inputs, target) for one step: noisy latents, a timestep and conditioning with the noise as target for
    a denoiser; an image with itself as target for an autoencoder."""
    import torch

    config, params = model.config, inspect.signature(model.forward).parameters
    channels = getattr(config, "in_channels", None) or 4
    if MODELS[type(model).__name__] == "reconstruct":
        size = getattr(config, "sample_size", None) or 32
        image = torch.randn(batch, channels, size, size)
        return {"sample": image}, image
    size = getattr(config, "sample_size", None) or SIZE
    packed = "img_ids" in params  # Flux takes latents as a token sequence with their positions
    noise = (
        torch.randn(batch, size * size // 4, channels) if packed else torch.randn(batch, channels, size, size)
    )
    first = "sample" if "sample" in params else "hidden_states"
    inputs: dict[str, Any] = {
        first: torch.randn_like(noise) + noise,
        "timestep": torch.randint(0, 1000, (batch,)).float(),
    }
    width = _conditioning_width(config)
    if "encoder_hidden_states" in params and width:
        inputs["encoder_hidden_states"] = torch.randn(batch, TEXT_TOKENS, width)
    if "pooled_projections" in params:
        inputs["pooled_projections"] = torch.randn(batch, config.pooled_projection_dim)
    if packed:
        inputs.update(
            img_ids=torch.zeros(size * size // 4, 3),
            txt_ids=torch.zeros(TEXT_TOKENS, 3),
            timestep=inputs["timestep"] / 1000,
        )
    if "class_labels" in params and getattr(config, "num_embeds_ada_norm", None) and first == "hidden_states":
        inputs["class_labels"] = torch.randint(0, config.num_embeds_ada_norm, (batch,))
    if "added_cond_kwargs" in params:
        inputs["added_cond_kwargs"] = {"resolution": None, "aspect_ratio": None}
    out_channels = getattr(config, "out_channels", None) or channels
    if not packed and out_channels != channels:  # learned-variance models predict noise and variance
        noise = torch.randn(batch, out_channels, size, size)
    return inputs, noise


def build(name: str, device: Any) -> tuple[Any, dict[str, Any], Any]:
    """(model, inputs, loss_fn) of a tiny random-weight `name` under `device`."""
    import diffusers
    import torch

    cls = getattr(diffusers, name)
    with torch.device(device):
        model = cls(**tiny_config(cls))
        inputs, target = step_inputs(model)

    def loss_fn(output: Any) -> Any:
        predicted = output.sample if hasattr(output, "sample") else output[0]
        return torch.nn.functional.mse_loss(predicted, target)

    return model, inputs, loss_fn
