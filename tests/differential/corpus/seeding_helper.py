# Exercises: the usual seeding helper (random, numpy, torch, torch.cuda.manual_seed / manual_seed_all) with
# the cuDNN determinism flags, then a draw on the device.
import random

import numpy as np
import torch


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


set_seed(42)
print("draw", torch.randn(3, device="cuda").sum().item() != 0, random.random() < 1)
