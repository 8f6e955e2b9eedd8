# Exercises: a --device argument ('cuda' by default, 'cuda:1' on the command line) with the guard that sets the
# current device only when the string names an index.
import argparse

import torch


def setup(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda:"):
        torch.cuda.set_device(args.device)
    device = torch.device(args.device)
    return device, torch.ones(2, device=device)


for argv in ([], ["--device", "cuda:1"] if torch.cuda.device_count() > 1 else []):
    device, t = setup(argv)
    print(argv, "->", device, t.device)
