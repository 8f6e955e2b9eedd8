# Exercises: a kernel made for CUDA beside a function's input (StyleTTS 2's decoder smooths F0 with
# `F.conv1d(F0.unsqueeze(1), torch.ones(1, 1, k).to('cuda'))`): the rewrite puts it where the input is.
import torch
import torch.nn.functional as F


def smooth(curve, k):
    return F.conv1d(curve.unsqueeze(1), torch.ones(1, 1, k).to("cuda"), padding=k // 2).squeeze(1) / k


curve = torch.arange(8, dtype=torch.float32).reshape(1, 8).cuda()
print("smoothed", [round(v, 4) for v in smooth(curve, 3).flatten().tolist()])
