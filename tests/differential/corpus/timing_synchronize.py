# Exercises: a benchmark loop that brackets the timed region with torch.cuda.synchronize(); a synchronize of an
# explicit device (`device=` keyword) and of the current one.
import time

import torch

device = torch.device("cuda", 0)
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(device)
x = torch.randn(32, 16, device=device)

for _ in range(2):  # warm-up
    model(x)
torch.cuda.synchronize(device=device)
start = time.perf_counter()
for _ in range(5):
    model(x)
torch.cuda.synchronize()
elapsed = time.perf_counter() - start
print(f"5 iterations in {elapsed * 1000:.1f} ms")
