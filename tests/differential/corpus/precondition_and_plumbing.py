# Exercises: code that only runs on CUDA by what it tests, and device-type tests around device plumbing: an
# NCCL backend test, a CUDA precondition (`if device.type != "cuda": raise`), and `x.device.type == "cuda"`
# choosing pinned memory and non-blocking copies (rewritten) or a CUDA-only matmul argument (left alone).
import torch


def backend_string(backend):
    if backend == "nccl":
        backend = "cuda:nccl,cpu:gloo"
    return backend


def select_device(device=0):
    device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if device.type != "cuda":
        raise NotImplementedError(f"the NCCL weight transfer needs a CUDA device, got {device}")
    if device.index is not None:
        torch.cuda.set_device(device)
    return device


def stage(x, device):
    if x.device.type == "cuda":
        x = x.pin_memory()
    return x.to(device, non_blocking=device.type == "cuda")


def project(tile, hidden, w, dtype):
    if tile.device.type == "cuda" and dtype in (torch.float16, torch.bfloat16):
        torch.mm(hidden, w, out_dtype=torch.float32, out=tile)
    else:
        torch.mm(hidden.float(), w.float(), out=tile)
    return tile


print("backend", backend_string("nccl"), backend_string("gloo"))
try:
    print("selected", select_device(0))
except Exception as error:  # no CUDA here: torch.cuda.set_device fails its own way per build
    print("no CUDA device:", type(error).__name__)
out = project(torch.zeros(2, 2), torch.ones(2, 3), torch.ones(3, 2), torch.float32)
print("staged", stage(torch.ones(2), torch.device("cpu")).sum().item(), "projected", out.sum().item())
