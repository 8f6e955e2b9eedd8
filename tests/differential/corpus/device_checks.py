# Exercises: checks of where tensors and modules are: `.is_cuda`, `.device.type == "cuda"`,
# `next(model.parameters()).is_cuda`, and `'cuda' in str(x.device)`.
import torch

model = torch.nn.Linear(2, 2)
if torch.cuda.is_available():
    model = model.cuda()
x = torch.ones(1, 2)
if next(model.parameters()).is_cuda and not x.is_cuda:
    x = x.cuda()
on_gpu = x.device.type == "cuda"
print("on gpu", on_gpu, "str check", "cuda" in str(x.device), "out", model(x).shape)
