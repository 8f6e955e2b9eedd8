"""Libraries that only run on NVIDIA GPUs, each with what replaces it on Trainium (NM701 reports their
imports; `cuda_files` and `kernel_modules` tell the code that drives them). Free of libcst: the scanner
reads the project's kernel modules before any parse."""

from __future__ import annotations

_SDPA = "`torch.nn.functional.scaled_dot_product_attention`"
_NKI = "PyTorch ops or an NKI kernel (`@nki.jit` registered with `torch_neuronx`'s `nki_op`)"
_COMPILE = "`torch.compile` (the `neuron` backend is chosen automatically on a Neuron device)"
_QUANTIZED = (
    "bfloat16 weights, or a Neuron-supported quantization method (its low-bit GEMM kernels are CUDA's)"
)

#: module (and everything below it) -> what to use on Trainium; the longest matching prefix wins
LIBRARIES: dict[str, str] = {
    "flash_attn": _SDPA,
    "flash_attn_interface": _SDPA,
    "xformers": f"{_SDPA} for attention, plain PyTorch ops for the rest",
    "apex": "`torch.amp`, `torch.optim` and `torch.nn` equivalents",
    "apex.amp": "`torch.autocast` with `dtype=torch.bfloat16`",
    "apex.optimizers": "`torch.optim` optimizers (default foreach implementation)",
    "apex.normalization": "`torch.nn.LayerNorm` / `torch.nn.RMSNorm`",
    "apex.parallel": "`torch.nn.parallel.DistributedDataParallel` or FSDP2 (`fully_shard`)",
    "bitsandbytes": "bfloat16 weights and optimizer states, or a Neuron-supported quantization method "
    "(bitsandbytes has no Neuron support)",
    "triton": _NKI,
    "liger_kernel": "the plain `torch.nn` modules and losses (Liger's kernels are Triton)",
    "cupy": f"torch tensor operations, or {_NKI}",
    "pycuda": _NKI,
    "numba.cuda": _NKI,
    "cuda": "`torch.accelerator` and PyTorch ops (cuda-python has no Neuron equivalent)",
    "pynvml": "`neuron-monitor` / `neuron-ls` for device metrics, `torch.accelerator.memory` for memory use",
    "nvtx": "`torch.profiler.record_function`",
    "transformer_engine": "`torch.autocast` with `dtype=torch.bfloat16` and "
    "`torch.nn` layers (no FP8 recipe)",
    "deepspeed.ops": "`torch.optim` optimizers, and FSDP2 "
    "(`torch.distributed.fsdp.fully_shard`) for sharding",
    "nvidia.dali": "`torch.utils.data.DataLoader` with a CPU preprocessing pipeline",
    "megatron": "`torch.distributed.tensor.parallel` and FSDP2 (`fully_shard`), or NeuronX Distributed for "
    "Megatron-style tensor and pipeline parallelism",
    "cudf": "pandas or another CPU dataframe library",
    "tensorrt": _COMPILE,
    "torch_tensorrt": _COMPILE,
    "deep_gemm": "`torch.matmul` / `torch.nn.functional.linear` in bfloat16 (DeepGEMM's FP8 GEMM kernels "
    "need NVIDIA Hopper or newer)",
    "smdistributed": "NeuronX Distributed (`neuronx_distributed`) or `torch.distributed` with FSDP2 "
    "(`fully_shard`): SageMaker's data and model parallel libraries run on NVIDIA GPU instances only",
    "bitblas": _QUANTIZED,
    "marlin": _QUANTIZED,
    "gemlite": _QUANTIZED,
    "flashinfer": _SDPA,
    "mamba_ssm": "the model's reference PyTorch path (Mamba's selective scan and `torch.nn.Conv1d`)",
    "causal_conv1d": "`torch.nn.functional.conv1d` with left padding",
    "fast_hadamard_transform": "a matrix product with a Hadamard matrix in PyTorch",
    "deep_ep": "`torch.distributed.all_to_all_single` for expert-parallel dispatch and combine",
    "nvshmem": "`torch.distributed` collectives and point-to-point ops",
    "nixl": "`torch.distributed` point-to-point ops (`send` / `recv`)",
    "cutlass": _NKI,
    "nvfuser": _COMPILE,
    "nvfuser_direct": _COMPILE,
    "cudnn": f"{_SDPA} and the `torch.nn` layers (the cuDNN frontend drives NVIDIA's cuDNN)",
    "exl_ext": _QUANTIZED,
    "exllamav2": _QUANTIZED,  # ExLlamaV2, outetts' exl2 backend (review 49): CUDA and ROCm only
    "exlv2_ext": _QUANTIZED,
    "awq_ext": _QUANTIZED,
}


def library_of(module: str) -> str | None:
    """The `LIBRARIES` key `module` belongs to (`flash_attn.bert_padding` -> `flash_attn`), if any."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in LIBRARIES:
            return prefix
    return None
