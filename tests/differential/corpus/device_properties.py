# Exercises: logging the GPUs: device_count, get_device_properties(i).total_memory, and a batch size derived
# from the memory of the current device.
import torch


def batch_size_for_memory(default=8):
    if not torch.cuda.is_available():
        return default
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return 64 if props.total_memory >= 40 * 2**30 else 16


for i in range(torch.cuda.device_count()):
    props = torch.cuda.get_device_properties(i)
    print(f"cuda:{i} {props.name} {props.total_memory // 2**30} GiB")
print("batch size", batch_size_for_memory())
