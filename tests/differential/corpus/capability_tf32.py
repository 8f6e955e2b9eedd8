# Exercises: a compute-capability guard (`get_device_capability() >= (8, 0)`) that turns on TF32 for matmuls and
# cuDNN, and reports the GPU.
import torch

if torch.cuda.is_available():
    major, minor = torch.cuda.get_device_capability()
    print(f"GPU {torch.cuda.get_device_name(0)} sm_{major}{minor}")
    if torch.cuda.get_device_capability() >= (8, 0):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
print("tf32", torch.backends.cuda.matmul.allow_tf32)
