"""NM402 / NM403: the CUDA caching allocator's `empty_cache` and memory statistics."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.patterns import QualifiedNameRule, call_args, cautious_about_device, guarded_fix
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement


def _both_spellings(names: dict[str, object]) -> dict[str, object]:
    """Each `torch.cuda.X` also as `torch.cuda.memory.X`, where the functions are defined."""
    table = dict(names)
    table.update({n.replace("torch.cuda.", "torch.cuda.memory.", 1): v for n, v in names.items()})
    return table


class CudaEmptyCache(QualifiedNameRule):
    """`torch.cuda.empty_cache()`.

    What it does
    Flags calls of and references to `torch.cuda.empty_cache`.

    Why it matters on Trainium
    It releases the CUDA caching allocator's unused blocks only; on a `neuron` device it does nothing for the
    memory you meant to free. `torch.accelerator.empty_cache()` releases the cache of whichever accelerator
    the process uses.

    Example
    del activations
    torch.cuda.empty_cache()

    Use instead
    del activations
    if torch.accelerator.is_available():
        torch.accelerator.empty_cache()

    Fix safety
    Safe: on CUDA the call is the same. `torch.cuda.empty_cache()` was a silent no-op without CUDA, but
    `torch.accelerator.empty_cache()` raises without an accelerator, so the fix guards it with
    `torch.accelerator.is_available()` (no second guard inside an existing availability check). A bare
    reference (`atexit.register(torch.cuda.empty_cache)`) gets no fix: it cannot be guarded in place. For a
    project that supports a torch older than 2.13 the fix is unsafe: before 2.13 the call raises on MPS (its
    allocator joined the unified memory API in 2.13), guard or not, where `torch.cuda.empty_cache()` did
    nothing.
    """

    code = "NM402"
    name = "cuda-empty-cache"
    message = "`torch.cuda.empty_cache()` frees CUDA memory only: use `torch.accelerator.empty_cache()`"
    severity = "warning"
    fix_safety = "safe"
    triggers = ((b"cuda", b"empty_cache"),)
    names_only = True
    NAMES = _both_spellings({"torch.cuda.empty_cache": "torch.accelerator.empty_cache"})
    VALID = (
        "import torch\nif torch.accelerator.is_available():\n    torch.accelerator.empty_cache()\n",
        "import torch\ntorch.mps.empty_cache()\n",
        "cache.empty_cache()\n",
    )
    INVALID = (
        Invalid(
            "import torch\ndef step():\n    torch.cuda.empty_cache()  # free\n    return 1\n",
            "import torch\ndef step():\n    if torch.accelerator.is_available():\n"
            "        torch.accelerator.empty_cache()  # free\n    return 1\n",
        ),
        Invalid(
            "from torch.cuda import empty_cache\nimport torch\nif torch.cuda.is_available():\n"
            "    empty_cache()\n",
            "import torch\nif torch.cuda.is_available():\n    torch.accelerator.empty_cache()\n",
        ),
        Invalid(
            "import atexit, torch\natexit.register(torch.cuda.empty_cache)\n",
        ),
    )

    def fix_for(self, node: cst.CSTNode, call: cst.Call | None, name: str) -> FixSpec | None:
        if call is None or call.args:
            return None
        title = "Replace `torch.cuda.empty_cache` with `torch.accelerator.empty_cache`"
        return guarded_fix(
            self, call, "torch.accelerator.empty_cache()", title, cpu_value="None", silent=True
        )


# qualified name -> (replacement callee, how the call is rewritten, value the CUDA call gave without CUDA)
# how: "guard" = torch.accelerator call guarded by is_available(); "plain" = swapped callee, unguarded
# (the CUDA call raised without CUDA too); "module" = the device module's function of the same name.
_MEMORY: dict[str, tuple[str, str, str | None] | None] = _both_spellings(
    {
        "torch.cuda.memory_allocated": ("torch.accelerator.memory_allocated", "guard", "0"),
        "torch.cuda.max_memory_allocated": ("torch.accelerator.max_memory_allocated", "guard", "0"),
        "torch.cuda.memory_reserved": ("torch.accelerator.memory_reserved", "guard", "0"),
        "torch.cuda.max_memory_reserved": ("torch.accelerator.max_memory_reserved", "guard", "0"),
        "torch.cuda.memory_cached": ("torch.accelerator.memory_reserved", "guard", "0"),
        "torch.cuda.max_memory_cached": ("torch.accelerator.max_memory_reserved", "guard", "0"),
        "torch.cuda.memory_stats": ("torch.accelerator.memory_stats", "guard", "{}"),
        "torch.cuda.reset_peak_memory_stats": ("torch.accelerator.reset_peak_memory_stats", "guard", None),
        "torch.cuda.reset_max_memory_allocated": ("torch.accelerator.reset_peak_memory_stats", "guard", None),
        "torch.cuda.reset_max_memory_cached": ("torch.accelerator.reset_peak_memory_stats", "guard", None),
        "torch.cuda.reset_accumulated_memory_stats": (
            "torch.accelerator.reset_accumulated_memory_stats",
            "guard",
            None,
        ),
        "torch.cuda.mem_get_info": ("torch.accelerator.get_memory_info", "plain", None),
        "torch.cuda.memory_summary": ("torch.get_device_module().memory_summary", "module", None),
        "torch.cuda.memory_stats_as_nested_dict": None,
        "torch.cuda.memory_snapshot": None,
        "torch.cuda.list_gpu_processes": None,
        "torch.cuda.set_per_process_memory_fraction": None,
        "torch.cuda.memory._record_memory_history": None,
        "torch.cuda.memory._dump_snapshot": None,
    }
)


class CudaMemoryStats(QualifiedNameRule):
    """CUDA caching-allocator statistics: `memory_allocated`, `max_memory_allocated`, `memory_stats`, ….

    What it does
    Flags `torch.cuda.memory_allocated`, `max_memory_allocated`, `memory_reserved`, `max_memory_reserved`
    (and their `*_cached` aliases), `memory_stats`, `mem_get_info`, `reset_peak_memory_stats` (and
    `reset_max_memory_*`), `reset_accumulated_memory_stats`, `memory_summary`, and the CUDA-only memory tools
    (`memory_snapshot`, `_record_memory_history`, `set_per_process_memory_fraction`, …).

    Why it matters on Trainium
    These report the CUDA allocator only: on a `neuron` device they say 0 bytes, or fail. The same numbers
    for any accelerator come from `torch.accelerator` (`memory_allocated`, `get_memory_info`, …). The keys
    of `memory_stats()` differ between devices, so code that reads them by name needs a look.

    Example
    torch.cuda.reset_peak_memory_stats()
    peak = torch.cuda.max_memory_allocated()

    Use instead
    if torch.accelerator.is_available():
        torch.accelerator.reset_peak_memory_stats()
    peak = (torch.accelerator.max_memory_allocated() if torch.accelerator.is_available() else 0)

    Fix safety
    Safe. Without CUDA, `memory_allocated` & co returned 0 and `memory_stats` an empty dict, while the
    `torch.accelerator` versions raise without an accelerator: the fix keeps the CPU value with
    `is_available()` (`0`, `{}`); a call that is a statement of its own is put under an `if`. The reset
    functions raised without CUDA; guarded, they are skipped there. `mem_get_info` becomes
    `torch.accelerator.get_memory_info` and `memory_summary` the device module's `memory_summary` without a
    guard, since both raised without CUDA and still do. A `device=` keyword becomes positional (the
    `torch.accelerator` functions take it positionally only). A guarded call given its device by a value that
    may be the CPU's (`memory_allocated(tensor.device)`, not an index or a device string) is unsafe: the
    `torch.accelerator` version raises for a CPU device on a host with another accelerator. `memory_snapshot`,
    `_record_memory_history`, `set_per_process_memory_fraction`, `list_gpu_processes` and
    `memory_stats_as_nested_dict` have no device-agnostic equivalent and get no fix. As for NM402, a fix
    that writes a `torch.accelerator` memory function is unsafe for a project that supports a torch older than
    2.13: those raise on MPS before 2.13.
    """

    code = "NM403"
    name = "cuda-memory-stats"
    message = "`{name}` reports CUDA memory only: use the `torch.accelerator` memory API"
    severity = "warning"
    fix_safety = "safe"
    triggers = ((b"cuda", b"mem"),)
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {
        name: (entry[0] if entry else None) for name, entry in _MEMORY.items()
    }
    VALID = (
        "import torch\npeak = torch.accelerator.max_memory_allocated()\n",
        "import torch\nfree, total = torch.accelerator.get_memory_info()\n",
        "import psutil\nused = psutil.virtual_memory().used\n",
    )
    INVALID = (
        Invalid(
            "import torch\ntorch.cuda.reset_peak_memory_stats()\npeak = torch.cuda.max_memory_allocated()\n",
            "import torch\nif torch.accelerator.is_available():\n"
            "    torch.accelerator.reset_peak_memory_stats()\n"
            "peak = torch.accelerator.max_memory_allocated() if torch.accelerator.is_available() else 0\n",
            count=2,
        ),
        Invalid(
            "import torch.cuda as tc\nimport torch\nif torch.cuda.is_available():\n"
            "    print(tc.memory_allocated(device=0))\n",
            "import torch\nif torch.cuda.is_available():\n    print(torch.accelerator.memory_allocated(0))\n",
        ),
        Invalid(
            "from torch.cuda.memory import memory_stats\ns = memory_stats().get('num_ooms', 0)\n",
            "import torch\ns = (torch.accelerator.memory_stats() if torch.accelerator.is_available() else"
            " {}).get('num_ooms', 0)\n",
        ),
        Invalid(
            "import torch\nfree, total = torch.cuda.mem_get_info()\nprint(torch.cuda.memory_summary())\n",
            "import torch\nfree, total = torch.cuda.mem_get_info()\n"
            "print(torch.get_device_module().memory_summary())\n",
            count=2,
        ),
        Invalid(
            "import torch\ntorch.cuda.memory._record_memory_history(max_entries=100000)\n",
        ),
    )

    def message_for(self, name: str) -> str:
        entry = _MEMORY[name]
        short = name.rsplit(".", 1)[-1]
        if entry is None:
            return f"`{short}` is CUDA-only with no accelerator equivalent: remove it or run it on CUDA only"
        return f"`torch.cuda.{short}` covers CUDA memory only: use `{entry[0]}`"

    def fix_for(self, node: cst.CSTNode, call: cst.Call | None, name: str) -> FixSpec | None:
        entry = _MEMORY[name]
        if call is None or entry is None:
            return None
        target, how, cpu_value = entry
        args = call_args(self, call) if how == "module" else call_args(self, call, positional=("device",))
        if args is None:
            return None
        title = f"Replace `{name}` with `{target}`"
        if how == "guard":
            return cautious_about_device(
                self,
                call,
                guarded_fix(self, call, f"{target}{args}", title, cpu_value, silent=cpu_value is not None),
            )
        return FixSpec(title, (Replacement(call, f"{target}{args}"),), imports=("torch",))
