# Exercises: the current AMP API with a literal 'cuda': torch.autocast('cuda', dtype=torch.float16) and
# torch.amp.GradScaler('cuda'), GradScaler() with its 'cuda' default, and a custom autograd function with
# torch.amp.custom_fwd(device_type='cuda').
import torch


class Square(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


torch.manual_seed(0)
model = torch.nn.Linear(4, 4).to("cuda")
scaler = torch.amp.GradScaler("cuda")
default_scaler = torch.amp.GradScaler()
with torch.autocast("cuda", dtype=torch.float16):
    out = Square.apply(model(torch.ones(2, 4, device="cuda")))
scaler.scale(out.float().sum()).backward()
print("scalers enabled", scaler.is_enabled(), default_scaler.is_enabled())
