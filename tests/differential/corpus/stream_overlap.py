# Exercises: overlapping a host-to-device copy on a side stream: torch.cuda.Stream(), `with torch.cuda.stream(s)`,
# current_stream().wait_stream, an event recorded on the side stream.
import torch

side = torch.cuda.Stream()
host = torch.ones(4, 4).pin_memory()
with torch.cuda.stream(side):
    dev = host.to("cuda", non_blocking=True)
    ready = torch.cuda.Event()
    ready.record(side)
torch.cuda.current_stream().wait_stream(side)
ready.wait()
print("copied", dev.sum().item(), "side stream done", side.query())
