# Exercises: Lightning's own accelerator vocabulary ('gpu', 'cuda', 'auto') chosen from torch.cuda.is_available()
# and passed to Trainer / Fabric (these are not torch device types: Lightning has no 'neuron' accelerator).
import lightning as L
import torch

accelerator = "gpu" if torch.cuda.is_available() else "cpu"
trainer = L.Trainer(accelerator=accelerator, devices=1, precision="16-mixed" if accelerator == "gpu" else "32-true")
fabric = L.Fabric(accelerator="cuda" if torch.cuda.is_available() else "cpu")
auto = L.Trainer(accelerator="auto")
model = fabric.setup(torch.nn.Linear(2, 2))
print("trainer on", trainer.device_type, trainer.precision, "fabric on", fabric.device, "auto on", auto.device_type)
print("model on", next(model.parameters()).device)
