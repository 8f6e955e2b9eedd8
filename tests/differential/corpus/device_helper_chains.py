# Exercises: accelerate/peft/trl-style per-device code written with helper functions: the CUDA branch of an
# `if is_npu_available(): ... elif torch.cuda.is_available(): ...` chain (it stays CUDA's), a chain's `else:`
# that frees the CUDA cache (it becomes an `elif` guarded by the accelerator), a GradScaler whose torch < 2.3
# branch stays as it is, and a `GradScaler` annotation (not touched).
import torch


def is_npu_available():
    return False


def is_xpu_available():
    return False


def is_torch_version(operation, version):
    return operation == ">=" and tuple(int(p) for p in version.split(".")[:2]) <= (2, 13)


def default_device():
    if is_npu_available():
        return torch.device("npu")
    elif torch.cuda.is_available():
        return torch.device("cuda")
    elif is_xpu_available():
        return torch.device("xpu")
    return torch.device("cpu")


def clear_device_cache():
    if is_xpu_available():
        torch.xpu.empty_cache()
    else:
        torch.cuda.empty_cache()


def get_grad_scaler(**kwargs):
    if is_torch_version(">=", "2.3"):
        return torch.amp.GradScaler("cuda", **kwargs)
    else:
        return torch.cuda.amp.GradScaler(**kwargs)


def scale(loss: torch.Tensor, scaler: "torch.cuda.amp.GradScaler | None" = None) -> torch.Tensor:
    return loss if scaler is None else scaler.scale(loss)


clear_device_cache()
scaler = get_grad_scaler(init_scale=2.0**4, enabled=torch.cuda.is_available())
print("device", default_device().type, "scaled", scale(torch.ones(1), scaler).item())
