# Exercises: choosing attention kernels with the deprecated torch.backends.cuda.sdp_kernel context manager
# around scaled_dot_product_attention on the device.
import torch
import torch.nn.functional as F

torch.manual_seed(0)
q = k = v = torch.randn(1, 2, 4, 8, device="cuda")
with torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=True, enable_mem_efficient=False):
    out = F.scaled_dot_product_attention(q, k, v)
print("attention", tuple(out.shape), round(out.sum().item(), 3))
