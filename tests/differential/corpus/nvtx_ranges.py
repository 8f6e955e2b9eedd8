# Exercises: NVTX ranges for Nsight: range_push/range_pop around the forward pass, `with nvtx.range(...)`
# around the backward pass and as a decorator.
import torch
from torch.cuda import nvtx


@nvtx.range("optimizer step")
def step(opt):
    opt.step()


model = torch.nn.Linear(4, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.cuda.nvtx.range_push("forward")
loss = model(torch.ones(2, 4, device="cuda")).sum()
torch.cuda.nvtx.range_pop()
with nvtx.range("backward"):
    loss.backward()
step(opt)
print("loss", round(loss.item(), 4))
