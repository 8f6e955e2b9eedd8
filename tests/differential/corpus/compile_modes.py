# Exercises: torch.compile with CUDA-graph modes ('reduce-overhead' for the model, 'max-autotune' behind a
# CUDA check) and nn.Module.compile.
import torch

model = torch.nn.Linear(4, 4).cuda()
fast = torch.compile(model, mode="reduce-overhead")
if torch.cuda.is_available():
    tuned = torch.compile(torch.nn.Linear(4, 4).cuda(), mode="max-autotune", fullgraph=True)
side = torch.nn.Linear(4, 4).cuda()
side.compile(mode="max-autotune-no-cudagraphs")
print("compiled", fast(torch.ones(1, 4, device="cuda")).shape)
