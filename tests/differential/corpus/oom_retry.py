# Exercises: catching torch.cuda.OutOfMemoryError to free the cache and retry with a smaller batch.
import torch

model = torch.nn.Linear(8, 8).cuda()


def forward(batch_size):
    if batch_size > 16:  # stands for the allocation that fails on a real GPU
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return model(torch.ones(batch_size, 8, device="cuda"))


batch_size = 32
while True:
    try:
        out = forward(batch_size)
        break
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        batch_size //= 2
print("batch size", batch_size, "out", tuple(out.shape))
