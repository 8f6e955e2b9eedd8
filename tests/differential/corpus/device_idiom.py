# Exercises: `device = "cuda" if torch.cuda.is_available() else "cpu"`, used for the model, the data, a new
# tensor and a comparison of the device string.
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = torch.nn.Linear(3, 1).to(device)
x = torch.arange(6, dtype=torch.float32).reshape(2, 3).to(device)
bias = torch.zeros(1, device=device)
out = model(x) + bias
print("device", device, "uses accelerator", device == "cuda")
print("out", [round(v, 4) for v in out.flatten().tolist()])
