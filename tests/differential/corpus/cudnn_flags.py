# Exercises: cuDNN flags set at start-up (benchmark autotuning, deterministic) before a small conv net runs.
import torch

torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = False
torch.backends.cudnn.enabled = True
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU(), torch.nn.Flatten()).cuda()
out = net(torch.ones(1, 1, 5, 5).cuda())
print("features", out.shape[1], "benchmark", torch.backends.cudnn.benchmark)
