"""The oldest torch release that has each API a fix writes, so a fix never emits one the project's torch
lacks.

Data, not code: `SINCE` maps an API name to the first release known to have it with the calling convention
the fixes use. Sources are listed in `/docs/rules.md` ("Minimum torch versions") and were read from the
versioned PyTorch documentation and the pull requests that added the APIs (2026-12). Where the first release
is not established, the value is the oldest release the tool was checked against that has it (2.13): such a
fix is then only written for projects that declare `target-torch = "2.13"` or newer.
"""

from __future__ import annotations

from collections.abc import Iterable

from neuron_migrate.migrate.fixes import FixSpec

#: the memory functions (pytorch#138222)
MEMORY_FUNCTIONS = tuple(
    f"torch.accelerator.{name}"
    for name in (
        "empty_cache",
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
        "max_memory_reserved",
        "memory_stats",
        "reset_peak_memory_stats",
        "reset_accumulated_memory_stats",
    )
)

SINCE: dict[str, tuple[int, int]] = {
    "torch.accelerator.is_available": (2, 6),
    "torch.accelerator.device_count": (2, 6),
    "torch.accelerator.synchronize": (2, 6),
    "torch.accelerator.current_stream": (2, 6),
    "torch.accelerator.set_stream": (2, 6),
    "torch.accelerator.current_accelerator(check_available=True)": (2, 7),
    "torch.accelerator.current_device_index": (2, 7),
    "torch.accelerator.set_device_index": (2, 7),
    "torch.accelerator.device_index": (2, 8),
    **dict.fromkeys(MEMORY_FUNCTIONS, (2, 9)),  # on MPS only from 2.13 (`cautions.MEMORY_ON_MPS_FROM`)
    # added after 2.9.0 was released; first release not established, 2.13 has them
    "torch.accelerator.get_memory_info": (2, 13),
    "torch.accelerator.get_device_capability": (2, 13),
    "torch.accelerator.empty_host_cache": (2, 13),
    "torch.accelerator.Graph": (2, 13),
    "torch.get_device_module": (2, 4),
    "torch.amp.GradScaler": (2, 3),
    "torch.amp.custom_fwd": (2, 4),
    "torch.amp.custom_bwd": (2, 4),
    "torch.distributed.get_default_backend_for_device": (2, 6),
    ".get_default_backend_for_device(": (2, 6),
    "torch.OutOfMemoryError": (2, 5),
    "torch.nn.attention.sdpa_kernel": (2, 3),
    "torch.Stream(": (2, 6),  # in 2.6 or earlier (first release not established)
    # a stream (a `torch.cuda.Stream` too) as its own context manager: pytorch#140138, after the 2.6 branch
    # cut; the 2.7 docs are the first to say it "supports with statement"
    "with torch.Stream": (2, 7),
    "torch.Event(": (2, 6),
}


def parse_version(text: str) -> tuple[int, int] | None:
    """`"2.9"` / `"2.9.1"` -> (2, 9); None when it is not a version."""
    parts = text.strip().split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        return None
    return int(parts[0]), int(parts[1])


def needs_torch(fix: FixSpec, target: tuple[int, int]) -> str | None:
    """The torch version a fix needs when that is newer than `target` (as text, saying what needs it when
    that is only the device idiom: llamafactory's `torch.amp.custom_fwd` is torch 2.4, its device type 2.7,
    review 44), else None."""
    needed = max((SINCE[api] for api in fix.relies_on), default=(0, 0))
    needed = max(needed, newest_in(r.text for r in fix.replacements)[0])
    idiom = ""
    if fix.uses_device or any("current_accelerator(" in i.text for i in fix.insertions):
        since = SINCE["torch.accelerator.current_accelerator(check_available=True)"]
        if since > needed:  # the APIs the fix names are older: say what needs the newer torch
            needed, idiom = since, " (to name the device: `current_accelerator(check_available=True)`)"
    return f"{needed[0]}.{needed[1]}{idiom}" if needed > target else None


def newest_in(texts: Iterable[str]) -> tuple[tuple[int, int], str]:
    """The newest torch release an API written in `texts` needs, and that API ((0, 0) and "" for none)."""
    needed, needing = (0, 0), ""
    for text in texts:
        for api, since in SINCE.items():
            if since > needed and api in text:
                needed, needing = since, api
    return needed, needing
