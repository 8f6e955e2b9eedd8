# Exercises: CUDA events for timing (enable_timing=True, record, synchronize, elapsed_time) around a forward pass.
import torch

model = torch.nn.Linear(8, 8).cuda()
x = torch.randn(4, 8).cuda()
start = torch.cuda.Event(enable_timing=True)
end = torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(3):
    y = model(x)
end.record()
end.synchronize()
print(f"forward x3: {start.elapsed_time(end):.2f} ms, out {tuple(y.shape)}")
