# Exercises: the pre-2.4 mixed-precision loop: torch.cuda.amp.autocast() and torch.cuda.amp.GradScaler(), with
# scale/step/update and a model moved with .cuda().
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
scaler = torch.cuda.amp.GradScaler()
x, y = torch.randn(16, 4).cuda(), torch.randn(16, 1).cuda()
for step in range(3):
    opt.zero_grad()
    with torch.cuda.amp.autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    print(f"step {step} loss {loss.item():.4f} scale {scaler.get_scale():.0f}")
