"""The runtime and compile rules (NM402–NM412, NM501–NM503) beyond their own examples: which fixes are safe
or unsafe case by case, and that fixed code actually runs on this CPU-only torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from .helpers import findings, fixed, fixed_until_stable

RUNTIME = (
    "NM402",
    "NM403",
    "NM404",
    "NM405",
    "NM406",
    "NM407",
    "NM408",
    "NM409",
    "NM410",
    "NM411",
    "NM412",
    "NM501",
    "NM502",
    "NM503",
)


def _safety(source: str, code: str) -> list[str | None]:
    return [f.fix.safety if f.fix else None for f in findings(source, (code,))]


def test_manual_seed_is_a_note_only_right_after_the_same_torch_seed():
    """Right after `torch.manual_seed(s)` the CUDA call is a repeat that works everywhere (a note); elsewhere
    it becomes the device module's own seeding (never `torch.manual_seed`, which would reseed the CPU
    generator on CUDA)."""
    seeded = (
        "import torch, numpy as np\ntorch.manual_seed(s)\nnp.random.seed(s)\ntorch.cuda.manual_seed_all(s)\n"
    )
    other_seed = "import torch\ntorch.manual_seed(1)\ntorch.cuda.manual_seed_all(s)\n"
    draws_between = "import torch\ntorch.manual_seed(s)\nw = torch.randn(3)\ntorch.cuda.manual_seed(s)\n"
    alone = "import torch\ndef f(s):\n    torch.cuda.manual_seed(s)\n"
    assert fixed(seeded, ("NM404",)) == seeded
    assert _safety(seeded, "NM404") == [None]
    assert "torch.get_device_module().manual_seed_all(s)" in fixed(other_seed, ("NM404",))
    assert "torch.get_device_module().manual_seed(s)" in fixed(draws_between, ("NM404",))
    assert fixed(alone, ("NM404",)) == (
        "import torch\ndef f(s):\n    if torch.accelerator.is_available():\n"
        "        torch.get_device_module().manual_seed(s)\n"
    )
    assert {s for src in (other_seed, draws_between, alone) for s in _safety(src, "NM404")} == {"safe"}


def test_stream_context_is_safe_only_when_the_argument_is_always_a_stream():
    made_here = "import torch\ns = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    pass\n"
    attribute = (
        "import torch\nclass P:\n    def __init__(self):\n        self.s = torch.cuda.Stream()\n"
        "    def run(self):\n        with torch.cuda.stream(self.s):\n            pass\n"
    )
    maybe_none = (
        "import torch\ns = torch.cuda.Stream() if fast else None\nwith torch.cuda.stream(s):\n    pass\n"
    )
    inline = "import torch\nwith torch.cuda.stream(torch.cuda.Stream()):\n    pass\n"
    assert _safety(made_here, "NM406") == ["safe", "safe"]
    assert _safety(attribute, "NM406") == ["safe", "safe"]
    # a stream that may be None is not kept in a name only a stream is in: neither fix is safe
    assert _safety(maybe_none, "NM406") == ["unsafe", "unsafe"]
    assert _safety(inline, "NM406") == ["safe", "safe"]
    assert _safety("import torch\nwith torch.cuda.stream(None):\n    pass\n", "NM406") == [None]


def test_a_new_stream_is_safe_only_where_it_is_used_as_any_stream():
    """`torch.Stream()` is not a `torch.cuda.Stream` on CUDA either: a stream returned or handed to other
    code (torch's symmetric memory returns one from a function annotated `torch.cuda.Stream`) keeps an
    unsafe fix; one a function or a class (a data prefetcher's `self.stream`) only uses as any stream is
    safe."""
    returned = "import torch\ndef backend_stream() -> torch.cuda.Stream:\n    return torch.cuda.Stream()\n"
    handed = "import torch\ndef run(lib):\n    s = torch.cuda.Stream()\n    lib.launch(s)\n"
    prefetcher = (
        "import torch\nclass Prefetcher:\n    def __init__(self):\n"
        "        self.stream = torch.cuda.Stream()\n"
        "    def preload(self, x):\n        with torch.cuda.stream(self.stream):\n"
        "            self.x = x.to(self.device, non_blocking=True)\n"
        "    def next(self):\n        torch.cuda.current_stream().wait_stream(self.stream)\n"
        "        self.x.record_stream(torch.cuda.current_stream())\n"
    )
    assert _safety(returned, "NM406") == ["unsafe"]
    assert _safety(handed, "NM406") == ["unsafe"]
    assert set(_safety(prefetcher, "NM406")) == {"safe"}
    notes = [f.message for f in findings(returned) if f.code == "NM406"]
    assert "`torch.Stream()` makes a `torch.Stream`, not a `torch.cuda.Stream`" in notes[0]


def test_current_stream_is_safe_only_where_it_is_used_as_any_stream():
    """`torch.accelerator.current_stream()` returns a `torch.Stream`, not a `torch.cuda.Stream` (and MPS has
    no device-module `current_stream`): safe where only a stream's own methods touch it."""
    chained = "import torch\ntorch.cuda.current_stream().wait_stream(side)\n"
    kept = (
        "import torch\ndef step(x, side):\n    main = torch.cuda.current_stream()\n"
        "    main.wait_stream(side)\n    x.record_stream(main)\n"
        "    with torch.cuda.stream(main):\n        pass\n"
    )
    handed_on = "import torch\ndef step(k):\n    main = torch.cuda.current_stream()\n    k.launch(main)\n"
    assert _safety(chained, "NM406") == ["safe"]
    assert fixed(chained, ("NM406",)) == chained.replace("cuda.current_stream", "accelerator.current_stream")
    assert _safety(kept, "NM406") == ["safe", "safe"]
    assert _safety(handed_on, "NM406") == ["unsafe"]
    [finding] = findings(handed_on, ("NM406",))
    assert "returns a `torch.Stream`, not a `torch.cuda.Stream`" in finding.message
    keyword = "import torch\ns = torch.cuda.current_stream(device=1)\n"
    assert "torch.accelerator.current_stream(1)" in fixed(keyword, ("NM406",), unsafe=True)


def test_a_fix_inside_the_stream_a_context_fix_keeps_goes_in_with_it():
    """`torch.cuda.stream(torch.cuda.Stream())` becomes its argument, and the argument `torch.Stream()`, in
    one run. Lightning's DDP strategy keeps the context in a name: `ctx =
    torch.cuda.stream(torch.cuda.Stream()) if device_ids is not None else nullcontext()`; applied one after
    the other, the next run judged the bare stream in a conditional unsafe and left `with
    torch.cuda.Stream()` behind, half migrated."""
    source = "import torch\nwith torch.cuda.stream(torch.cuda.Stream()):\n    pass\n"
    assert fixed(source, ("NM406",)) == "import torch\nwith torch.Stream():\n    pass\n"
    kept = (
        "import torch\ndef wrap(model, ids):\n"
        "    ctx = torch.cuda.stream(torch.cuda.Stream()) if ids is not None else nullcontext()\n"
        "    with ctx:\n        return DDP(model, device_ids=ids)\n"
    )
    assert "    ctx = torch.Stream() if ids is not None else nullcontext()\n" in fixed_until_stable(kept)


def test_set_rng_state_all_loop_does_not_rebind_user_names():
    source = "import torch\ndevice_index = 3\nrng_state = 1\ntorch.cuda.set_rng_state_all(states)\n"
    after = fixed(source, ("NM405",))
    assert "for device_index_2, rng_state_2 in enumerate(states):" in after
    assert "device_index = 3\nrng_state = 1\n" in after


def test_backend_switches_are_information_without_edits():
    """cuDNN and CUDA backend switches work on every device: reported as information, never rewritten."""
    source = (
        "import torch\ntorch.backends.cudnn.benchmark = True\ntorch.backends.cudnn.deterministic = True\n"
        "torch.backends.cuda.matmul.allow_tf32 = True\nx = 1; torch.backends.cudnn.enabled = False\n"
    )
    got = findings(source, ("NM410", "NM411"), unsafe=True)
    assert len(got) == 4 and {f.severity for f in got} == {"info"} and all(f.fix is None for f in got)
    assert fixed(source, ("NM410", "NM411"), unsafe=True) == source


def test_pin_memory_is_information_and_torch_functions_are_not_flagged():
    method = "import torch\nif torch.cuda.is_available():\n    x = x.pin_memory()\n"
    helper = "from torch.utils.data._utils.pin_memory import pin_memory\nb = pin_memory(batch, 'cuda')\n"
    (note,) = findings(method, ("NM412",))
    assert note.severity == "info" and note.fix is None
    assert findings(helper, ("NM412",)) == []


def test_compile_mode_stays_and_dynamic_goes_with_unsafe_fixes():
    """neuron ignores a tuning mode with a warning (information only); it rejects `dynamic=True` (unsafe
    fix)."""
    source = "import torch\nm = torch.compile(model, mode='max-autotune', dynamic=True)\n"
    assert {f.code for f in findings(source, ("NM501", "NM502"))} == {"NM501", "NM502"}
    assert fixed(source, ("NM501", "NM502")) == source
    assert (
        fixed(source, ("NM501", "NM502"), unsafe=True)
        == "import torch\nm = torch.compile(model, mode='max-autotune')\n"
    )


def test_strings_and_comments_do_not_count():
    source = (
        '"""Uses torch.cuda.empty_cache() and torch.backends.cudnn.benchmark."""\n'
        "# torch.cuda.manual_seed(0); torch.compile(m, mode='max-autotune')\n"
        "print('torch.cuda.Stream() with pin_memory=True')\n"
    )
    assert findings(source, RUNTIME) == []


# CUDA code that fails on a CPU-only machine in several places; after the fixes it must run there, with the
# values the CUDA calls gave without CUDA.
CUDA_PROGRAM = """\
import torch
from torch.profiler import ProfilerActivity, profile

torch.manual_seed(0)
torch.cuda.manual_seed_all(0)
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = True
torch.backends.cuda.matmul.allow_tf32 = True
torch.cuda.reset_peak_memory_stats()
assert torch.cuda.max_memory_allocated() == 0
assert torch.cuda.memory_stats() == {}
torch.cuda.empty_cache()
states = torch.cuda.get_rng_state_all()
assert states == []
torch.cuda.set_rng_state_all(states)
side = torch.cuda.Stream(priority=-1)
with torch.cuda.stream(side):
    x = torch.ones(2)
with torch.cuda.nvtx.range("block"):
    y = x + 1
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as both:
    y * 2
with profile(activities=[ProfilerActivity.CUDA]) as device_only:
    y * 3
assert len(both.key_averages()) and len(device_only.key_averages())
q = torch.randn(1, 1, 4, 8)
with torch.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False):
    torch.nn.functional.scaled_dot_product_attention(q, q, q)
loader = torch.utils.data.DataLoader([1, 2], pin_memory=True)
assert [int(b) for b in loader] == [1, 2]
start = torch.cuda.Event(enable_timing=True)
print("ran")
"""


def test_fixed_cuda_program_runs_on_a_cpu_only_torch(tmp_path):
    after = fixed(CUDA_PROGRAM, RUNTIME, unsafe=True)
    # backend switches stay, and so does the CUDA seed right after `torch.manual_seed`: they work anywhere
    kept = after.replace("torch.backends.cuda", "").replace("torch.cuda.manual_seed_all(0)", "")
    assert "torch.cuda" not in kept
    assert fixed(after, RUNTIME, unsafe=True) == after
    script = tmp_path / "program.py"
    script.write_text(after)
    if torch.accelerator.is_available():
        pytest.skip("the program asserts the values the CUDA calls gave without an accelerator")
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False
    )
    assert run.returncode == 0, textwrap.shorten(run.stderr, 2000)
    assert run.stdout.strip().endswith("ran")


def test_annotations_are_not_reported():
    """An annotation runs no device code (and `from torch.cuda.amp import GradScaler` in an old-torch branch
    only names the type)."""
    source = (
        "import torch\nfrom typing import Optional\nif is_torch_version('>=', '2.4.0'):\n"
        "    from torch.amp import GradScaler\nelse:\n    from torch.cuda.amp import GradScaler\n"
        "def save(scaler: Optional[GradScaler] = None, s: 'torch.cuda.Stream' = None) -> torch.cuda.Event:\n"
        "    event: torch.cuda.Event = make_event()\n    return event\n"
    )
    assert findings(source) == []


@pytest.mark.parametrize(
    ("between", "seed", "redundant"),
    [
        ("", "seed", True),
        ("np.random.seed(seed)\n", "seed", True),  # seeding statements may stand between
        ("x = torch.rand(3)\n", "seed", False),  # a CPU draw between: the CUDA seed is not redundant
        ("", "seed + 1", False),  # another seed
    ],
)
def test_a_cuda_seed_just_before_torch_manual_seed_needs_no_change(between, seed, redundant):
    """spikingjelly's examples (review 39) seed CUDA on the line *before* `torch.manual_seed(seed)`, which
    seeds every device again with the same seed: like the same call just after it, a note, not a rewrite."""
    source = (
        f"import numpy as np\nimport torch\nseed = 1\ntorch.cuda.manual_seed({seed})\n"
        f"{between}torch.manual_seed(seed)\n"
    )
    [finding] = findings(source, ("NM404",))
    assert ("just after it already seeds every device" in finding.message) is redundant
    assert (finding.fix is None) is redundant
    assert (fixed(source) == source) is redundant


@pytest.mark.parametrize(("target", "written"), [((2, 6), False), ((2, 7), True)])
def test_a_stream_as_its_own_context_manager_needs_torch_2_7(target, written):
    """`with s:` on a stream (a `torch.cuda.Stream` too) came with pytorch#140138, after the 2.6 branch cut:
    spikingjelly declares `torch>=2.6` (review 39 #4), where `with torch.cuda.stream(s):` works and `with s:`
    raises. The fix is held back below 2.7, and its message says so."""
    source = "import torch\ns = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    pass\n"
    [context] = [f for f in findings(source, ("NM406",), target_torch=target) if f.line == 3]
    assert (context.fix is not None) is written
    assert ("the fix needs torch >= 2.7" in context.message) is not written
