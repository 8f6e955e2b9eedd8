# Exercises: the NCCL backend through an argparse default and a variable, the cuda-or-gloo idiom, and
# `device_id=` binding the process group to the rank's device.
import argparse
import os

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--dist-backend", default="nccl")
args = parser.parse_args([])

local_rank = int(os.environ.get("LOCAL_RANK", "0"))
backend = args.dist_backend if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend=backend, device_id=torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else None)
print("backend", dist.get_backend())
dist.destroy_process_group()
