# Exercises: a per-GPU report loop (device_count, get_device_name(i), memory_allocated(i), mem_get_info) and a
# synchronize of every device.
import torch

for i in range(torch.cuda.device_count()):
    torch.ones(1024, device=f"cuda:{i}")
    free, total = torch.cuda.mem_get_info(i)
    print(f"cuda:{i} {torch.cuda.get_device_name(i)} allocated {torch.cuda.memory_allocated(i)} B "
          f"free {free * 100 // total}%")
    torch.cuda.synchronize(i)
