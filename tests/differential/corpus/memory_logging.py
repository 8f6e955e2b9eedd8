# Exercises: memory logging around an evaluation: reset_peak_memory_stats, max_memory_allocated,
# memory_reserved, memory_allocated(device) and empty_cache afterwards.
import torch


def log_memory(tag):
    if torch.cuda.is_available():
        peak = torch.cuda.max_memory_allocated() / 2**20
        reserved = torch.cuda.memory_reserved() / 2**20
        print(f"{tag}: peak {peak:.3f} MiB reserved {reserved:.1f} MiB")


model = torch.nn.Linear(64, 64).cuda()
torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    for _ in range(2):
        model(torch.randn(128, 64, device="cuda"))
log_memory("eval")
print("allocated on 0:", torch.cuda.memory_allocated(0))
torch.cuda.empty_cache()
