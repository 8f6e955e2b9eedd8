"""Autocast for the stand-in device: PrivateUse1 has no autocast kernels of its own.

A fallthrough for `AutocastPrivateUse1` lets every op pass, and kernels for the upstream CUDA policy lists
(kept as data) cast: matmul-like ops to the autocast dtype, the usual list to float32. Both stand-ins (C++ and
pure Python) register the same policy, so `torch.autocast("neuron", dtype=...)` behaves the same on either.
"""

from __future__ import annotations

from typing import Any

import torch

DEVICE_NAME = "neuron"

# The upstream CUDA policy lists (ATen autocast_mode.cpp), kept as data: ops cast to the autocast dtype, and
# ops forced to float32. Ops not listed run in whatever dtype their inputs have (the fallthrough below).
LOWER_PRECISION_OPS = (
    "_convolution",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_tbc",
    "conv_transpose1d",
    "conv_transpose2d.input",
    "conv_transpose3d.input",
    "convolution",
    "prelu",
    "addmm",
    "addmv",
    "addr",
    "matmul",
    "einsum",
    "mm",
    "mv",
    "linear",
    "addbmm",
    "baddbmm",
    "bmm",
    "chain_matmul",
    "linalg_multi_dot",
    "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell",
    "lstm_cell",
    "gru_cell",
    "rnn_tanh_cell",
    "rnn_relu_cell",
    "_scaled_dot_product_flash_attention",
    "scaled_dot_product_attention",
)
FP32_OPS = (
    "acos",
    "asin",
    "cosh",
    "erfinv",
    "exp",
    "expm1",
    "log",
    "log10",
    "log2",
    "log1p",
    "reciprocal",
    "rsqrt",
    "sinh",
    "tan",
    "pow.Tensor_Scalar",
    "pow.Tensor_Tensor",
    "pow.Scalar",
    "softplus",
    "layer_norm",
    "native_layer_norm",
    "group_norm",
    "frobenius_norm.dim",
    "nuclear_norm",
    "cosine_similarity",
    "poisson_nll_loss",
    "cosine_embedding_loss",
    "nll_loss",
    "nll_loss2d",
    "hinge_embedding_loss",
    "kl_div",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "mse_loss",
    "margin_ranking_loss",
    "multilabel_margin_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
    "multi_margin_loss",
    "binary_cross_entropy_with_logits",
    "dist",
    "pdist",
    "cdist",
    "renorm",
    "logsumexp",
    "cross_entropy_loss",
)
_AUTOCAST_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        eligible = (
            value.is_floating_point() and value.device.type == DEVICE_NAME and value.dtype != torch.float64
        )
        return value.to(dtype) if eligible and value.dtype != dtype else value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _autocast_kernel(packet: Any, overload: str, to_fp32: bool) -> Any:
    op = getattr(packet, overload)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        dtype = torch.float32 if to_fp32 else torch.get_autocast_dtype(DEVICE_NAME)
        args, kwargs = _cast(args, dtype), {k: _cast(v, dtype) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS):
            return op(*args, **kwargs)

    return kernel


def register_autocast(lib: torch.library.Library, fallback_lib: torch.library.Library) -> None:
    """Register the fallthrough on `fallback_lib` (namespace `_`) and the casting kernels on `lib`
    (`aten`)."""
    fallback_lib.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    for names, to_fp32 in ((LOWER_PRECISION_OPS, False), (FP32_OPS, True)):
        for qualified in names:
            base, _, overload = qualified.partition(".")
            packet = getattr(torch.ops.aten, base, None)
            if packet is None or (overload or "default") not in packet.overloads():
                continue  # the list spans torch versions; skip what this torch lacks
            lib.impl(
                qualified, _autocast_kernel(packet, overload or "default", to_fp32), "AutocastPrivateUse1"
            )
