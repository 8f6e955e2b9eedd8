# Exercises: saving and restoring the CUDA generators with a training state (get_rng_state_all /
# set_rng_state_all, get_rng_state on the current device), then repeating a draw.
import torch

torch.manual_seed(0)
state = {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all()}
first = torch.rand(2, device="cuda")
torch.set_rng_state(state["cpu"])
torch.cuda.set_rng_state_all(state["cuda"])
again = torch.rand(2, device="cuda")
current = torch.cuda.get_rng_state()
print("repeatable", torch.equal(first, again), "state bytes", current.numel())
