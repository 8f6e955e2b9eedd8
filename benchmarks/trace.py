"""Tracer costs in one run: a 70B Llama under --fake, recorder overhead, and a 162M GPT script trace.

The recorder's overhead is measured against plain eager; the script trace is of a 162M-parameter GPT
benchmark.

    .venv/bin/python benchmarks/trace.py [--repeat 5] [--batch-size 16] [--skip-70b] [--skip-script]

The C++ stand-in is built first (once; cached), so no number below includes its compile. The machine's load
average is printed with the numbers: they are wall or CPU times on a shared 2-core machine.

1. `neuron-migrate trace --hf llama --hf-config <70B sizes> --fake` through the real code path (a child
   process): wall time as a user sees it (process start, imports, model construction under FakeTensorMode, the
   traced forward + backward + AdamW step) and the child's peak RSS. Targets: <= 30 s, <= 1 GiB.
2. One training step (forward, backward, AdamW) of the bundled tiny GPT (examples/cuda_project) at its
   training batch size (16, as train.py) in a fresh process, best of --repeat in CPU time on one thread, as:
   - eager on CPU (the peer),
   - eager on CPU under the recorder (dispatch mode + call sites + autograd-node stamping),
   - eager on the stand-in neuron device without the recorder,
   - the stand-in under the recorder (what `trace` runs).
   Ratios are printed against eager CPU. Target for the recorder: <= 3x.
3. `neuron-migrate trace benchmarks/scripts/gpt_benchmark.py -- --steps 20` (GPT-2-small sizes with an untied
   head, ~162M parameters, batch 2 x 32) through the real code path: wall time until the script is stopped
   once its op set is stable. Peer: the same script run to its end (20 steps) in a plain process on the CPU.
   Target: < 60 s.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES_70B = (
    "hidden_size=8192,num_hidden_layers=80,intermediate_size=28672,num_attention_heads=64,"
    "num_key_value_heads=8,vocab_size=128256"
)


def bench_70b() -> None:
    sys.path.insert(0, str(ROOT))
    from neuron_migrate.opdb.tracer.runner import TraceOptions, run_trace
    from neuron_migrate.opdb.tracer.targets import TargetSpec, parse_hf_config

    start = time.perf_counter()
    result = run_trace(
        TargetSpec("hf", "llama", (), parse_hf_config(SIZES_70B)), TraceOptions(fake=True, root=str(ROOT))
    )
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak = usage.ru_maxrss / 1024  # KiB on Linux
    cpu = usage.ru_utime + usage.ru_stime
    calls = sum(use.count for use in result.ops)
    print(
        f"70B llama --fake: {wall:.1f} s wall (target <= 30 s: {wall / 30:.2f}x of budget; {cpu:.1f} s CPU), "
        f"peak RSS {peak:.0f} MiB (target <= 1024: {peak / 1024:.2f}x of budget); "
        f"{len({u.op for u in result.ops})} distinct ops, {calls} op calls"
    )


CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/examples/cuda_project")
import torch
from neuron_migrate.opdb.db import load_snapshot
from neuron_migrate.opdb.tracer.recorder import OpRecorder, recording
from trace_target import build

repeat, batch_size = int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)  # CPU time of one thread: steadier than wall time on a shared machine
snapshot = load_snapshot()

def step(work):
    model, inputs, loss_fn, optimizer = work
    loss = loss_fn(model(*inputs))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()

def best(device, record):
    torch.manual_seed(0)
    with torch.device(device):
        work = build(batch_size)
    step(work)  # warm-up: optimizer state, lazy inits
    times = []
    for _ in range(repeat):
        recorder = OpRecorder(snapshot, sys.argv[1], device_type=device)
        start = time.process_time()
        if record:
            with recording(recorder):
                step(work)
        else:
            step(work)
        times.append(time.process_time() - start)
    return min(times), sum(sum(c.values()) for c in recorder.calls.values())

from neuron_migrate.opdb.tracer import device
kind = device.install(snapshot, keep_going=True)  # before any backward: autograd sizes its device queues once
out = {}
out["eager_cpu"], _ = best("cpu", False)
out["recorded_cpu"], out["calls_cpu"] = best("cpu", True)
out["stand_in"], _ = best("neuron", False)
out["traced_stand_in"], out["calls_neuron"] = best("neuron", True)
out["kind"] = kind
print(json.dumps(out))
"""


def bench_overhead(repeat: int, batch_size: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(ROOT), str(repeat), str(batch_size)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    base = r["eager_cpu"]
    print(
        f"tiny GPT train step on the {r['kind']}, batch {batch_size} (best of {repeat}, CPU time, 1 thread), "
        f"{r['calls_neuron']} aten calls on neuron "
        f"({r['calls_cpu']} on cpu):"
    )
    for key, label in (
        ("eager_cpu", "eager on CPU (peer)"),
        ("recorded_cpu", "recorder on CPU"),
        ("stand_in", "stand-in device, no recorder"),
        ("traced_stand_in", "stand-in + recorder"),
    ):
        print(f"  {label:32s} {r[key] * 1000:8.1f} ms  {r[key] / base:5.2f}x eager")
    print(
        f"  recorder overhead on the same device: {r['recorded_cpu'] / base:.2f}x on CPU (target <= 3x), "
        f"{r['traced_stand_in'] / r['stand_in']:.2f}x on the stand-in"
    )


def bench_script() -> None:
    from neuron_migrate.opdb.tracer.runner import TraceOptions, run_trace
    from neuron_migrate.opdb.tracer.targets import TargetSpec

    script = "benchmarks/scripts/gpt_benchmark.py"
    start = time.perf_counter()
    peer = subprocess.run(
        [sys.executable, script, "--steps", "20"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    peer_wall = time.perf_counter() - start
    if peer.returncode != 0:
        raise SystemExit(peer.stderr[-2000:])
    start = time.perf_counter()
    result = run_trace(TargetSpec("script", script, ("--steps", "20")), TraceOptions(root=str(ROOT)))
    wall = time.perf_counter() - start
    steps = next((n for n in result.notes if n.startswith("script ")), "?")
    print(
        f"script trace, 162M GPT benchmark, batch 2x32: {wall:.1f} s wall (target < 60 s: {wall / 60:.2f}x "
        f"of budget); {steps}; {sum(u.count for u in result.ops)} op calls on {result.device}"
    )
    print(
        f"  peer: the script run to its end (20 steps) on plain CPU: {peer_wall:.1f} s wall "
        f"({wall / peer_wall:.2f}x)"
    )


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16, help="the example's training batch (train.py)")
    parser.add_argument("--skip-70b", action="store_true")
    parser.add_argument("--skip-script", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from neuron_migrate.opdb.tracer.runner import TraceOptions, ensure_extension

    ensure_extension(TraceOptions())  # the one-time C++ build is not part of any number below
    print(f"load average before: {_load()}")
    if not args.skip_70b:
        bench_70b()  # first: RUSAGE_CHILDREN's peak then belongs to this child alone
    bench_overhead(args.repeat, args.batch_size)
    if not args.skip_script:
        bench_script()
    print(f"load average after: {_load()}")


if __name__ == "__main__":
    main()
