# Exercises: checkpoint loading with map_location: the rank's device as an f-string, 'cuda', a storage lambda,
# then load_state_dict into a model on the device.
import os

import torch

torch.manual_seed(0)
torch.save(torch.nn.Linear(2, 2).state_dict(), "ckpt.pt")

local_rank = int(os.environ.get("LOCAL_RANK", "0"))
model = torch.nn.Linear(2, 2).cuda()
state = torch.load("ckpt.pt", map_location=f"cuda:{local_rank}")
print("mapped to", state["weight"].device)
model.load_state_dict(torch.load("ckpt.pt", map_location="cuda"))
host = torch.load("ckpt.pt", map_location=lambda storage, loc: storage)
print("host copy on", host["bias"].device, "model on", next(model.parameters()).device)
