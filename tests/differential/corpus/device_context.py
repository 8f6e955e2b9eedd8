# Exercises: `with torch.cuda.device(i)` around allocations, torch.cuda.current_device(), and factory calls with
# `device=` inside the block.
import os

import torch

local_rank = int(os.environ.get("LOCAL_RANK", "0"))
with torch.cuda.device(local_rank):
    buf = torch.zeros(3, device="cuda")
    print("inside, current device", torch.cuda.current_device(), "buffer on", buf.device)
print("outside, current device", torch.cuda.current_device())
