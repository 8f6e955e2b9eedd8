# Exercises: the review of torch's and transformers' own sources: a device named once above the loop that
# uses it (not in every iteration), a device in a parameter's default (an unsafe fix: the safe tier leaves
# it), a device-type test kept in a name that only selects device plumbing, a device only reached without an
# accelerator (`acc.type if acc is not None else "cuda"`), a CUDA function stored in a table, a per-device
# `device_type=` choice, and a CUDA seed right after `torch.manual_seed` (a note: it works everywhere).
import torch


def move(inputs, runtime_inputs_to_move):
    for i in runtime_inputs_to_move:
        if inputs[i] is not None:
            inputs[i] = inputs[i].cuda(non_blocking=True)
    return inputs


def broadcast_scalars(scalars, device: torch.device | None = torch.device("cuda")):
    return torch.tensor(scalars, device=device)


def stage(batch, device):
    on_gpu = device.type == "cuda"
    return batch.to(device, non_blocking=on_gpu) if on_gpu else batch


def fork_device_type(device_type=None):
    acc = torch.accelerator.current_accelerator()
    # Default to cuda instead of CPU since CPU rng is always forked
    return device_type or (acc.type if acc is not None else "cuda")


def skip_info(reason, device_type):
    return (reason, device_type)


def set_seed(seed):
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    # ^^ safe to call this function even if cuda is not available
    return torch.rand(1).item()


GUARDED = [torch.accelerator.current_device_index, torch.cuda.current_device]
SKIPS = (skip_info("no channels_last", device_type="cuda"), skip_info("no channels_last", device_type="mps"))
print("seeded", set_seed(0), "tables", len(GUARDED), SKIPS)
print("fork", fork_device_type())
if torch.cuda.is_available():
    moved = move([torch.ones(1), None, torch.zeros(2)], [0, 1, 2])
    print("moved", [None if t is None else t.device.type for t in moved])
    print("staged", stage(torch.ones(2), torch.device("cuda")).device.type)
    print("scalars", broadcast_scalars([1, 2]).device.type)
print("staged on cpu", stage(torch.ones(2), torch.device("cpu")).device.type)
