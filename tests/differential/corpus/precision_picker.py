# Exercises: a precision picker: bf16 when the GPU supports it (is_bf16_supported), fp16 otherwise, fp32 without
# CUDA; the chosen dtype drives autocast.
import torch


def pick_dtype():
    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    if torch.cuda.is_available():
        return torch.float16
    return torch.float32


dtype = pick_dtype()
print("autocast dtype", dtype)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(4, 4).to(device)
with torch.autocast(device_type=device, dtype=dtype, enabled=dtype != torch.float32):
    out = model(torch.ones(2, 4, device=device))
print("out", out.shape)
