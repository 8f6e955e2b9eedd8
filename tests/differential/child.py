"""The interpreter the harness runs snippets in: `python -m tests.differential.child ENV RESULTS.json < jobs`.

ENV is `cuda` (the CUDA emulation), `cpu` (plain torch) or `neuron` (the stand-in device, registered once
here). torch is imported once; each job then runs in a forked copy of this process, so that nothing one
snippet changes process-wide (default device, seeds, backend flags, a process group, the current device) is
seen by the next, and a crash or a hang ends one job only. Results are written as JSON (stdout belongs to the
snippets).

The environment is the one torchrun gives a worker: under the emulation rank 1 of 2 (LOCAL_RANK=1, so that a
rewrite that loses the index shows), elsewhere rank 0 of 1 with a fresh MASTER_PORT per job.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import sys
import tempfile
import time

TIMEOUT = 60.0
FAKE_PACKAGES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_packages")
RANKS = {
    "cuda": {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"},
    "cpu": {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"},
    "neuron": {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"},
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _prepare(env: str) -> None:
    """Import what every job needs once, before the first fork."""
    os.environ.update(RANKS[env], MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    sys.path.insert(0, FAKE_PACKAGES)  # `import lightning` in the corpus (not installed here)
    import torch
    import torch._dynamo
    import torch.distributed
    import torch.utils.data

    from tests.differential import execution  # noqa: F401
    from tests.differential.libraries import install_checked_compile
    from tests.differential.patches import Patches

    if env == "neuron":
        from tests.differential.adapters import install_standin_device

        install_standin_device()
    torch.set_num_threads(1)
    if env == "cuda":  # installed once for all jobs; each forked job restarts it (emulation.restart)
        from tests.differential.emulation import emulate_cuda

        emulate_cuda().__enter__()
    else:
        install_checked_compile(Patches())
    # what is loaded now is shared with every forked job: keep the collector from touching (and so copying)
    # those pages in each child
    gc.collect()
    gc.freeze()


def _run_in_fork(job: dict, env: str) -> dict:
    from tests.differential.execution import Outcome, run_snippet

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the job
        os.close(read_end)
        try:
            if env != "cuda":
                os.environ["MASTER_PORT"] = str(_free_port())
            workdir = os.path.join(job["workdir"], str(os.getpid()))
            data = json.dumps(run_snippet(job["source"], env, job["fragment"], job["id"], workdir).to_json())
        except BaseException as err:
            data = json.dumps(Outcome(error=f"harness failure: {type(err).__name__}: {err}").to_json())
        with os.fdopen(write_end, "w") as pipe:
            pipe.write(data)
        os._exit(0)  # no interpreter teardown: torch can abort there after the stand-in ran autograd
    os.close(write_end)
    chunks, deadline = [], time.monotonic() + TIMEOUT
    with os.fdopen(read_end, "rb") as pipe:
        while True:
            ready, _, _ = select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                chunks = []
                break
            chunk = os.read(pipe.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        reason = (
            f"timed out after {TIMEOUT:.0f} s" if status == signal.SIGKILL else f"died (wait status {status})"
        )
        return Outcome(error=f"harness failure: the job {reason}").to_json()
    return json.loads(b"".join(chunks))


#: a job whose process group lost the race for its free port (another process took it in between) runs again
_PORT_TAKEN = ("EADDRINUSE", "Address already in use")


def _run(job: dict, env: str) -> dict:
    outcome = _run_in_fork(job, env)
    if any(marker in (outcome.get("error") or "") for marker in _PORT_TAKEN):
        outcome = _run_in_fork(job, env)
    return outcome


def main() -> None:
    env, results_path = sys.argv[1], sys.argv[2]
    jobs = json.load(sys.stdin)
    _prepare(env)
    with tempfile.TemporaryDirectory(prefix=f"nm-diff-{env}-") as scratch:
        results = {job["id"]: _run({**job, "workdir": scratch}, env) for job in jobs}
    with open(results_path, "w") as out:
        json.dump(results, out)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
