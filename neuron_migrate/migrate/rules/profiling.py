"""NM408 / NM409: NVTX annotations and the profiler's CUDA activity."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.fixes import DEVICE_TYPE
from neuron_migrate.migrate.guards import accelerator_certain
from neuron_migrate.migrate.patterns import QualifiedNameRule
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement

_NVTX_MESSAGES = {
    "range": "NVTX ranges are CUDA-only: use `torch.profiler.record_function(name)`",
    "range_push": "NVTX ranges are CUDA-only: wrap the region in "
    "`with torch.profiler.record_function(name):` and drop the matching `range_pop()`",
    "range_pop": "NVTX ranges are CUDA-only: drop `range_pop()` with its `range_push()` and wrap the "
    "region in `with torch.profiler.record_function(name):`",
    "range_start": "NVTX ranges are CUDA-only: use `with torch.profiler.record_function(name):` around the "
    "region",
    "range_end": "NVTX ranges are CUDA-only: use `with torch.profiler.record_function(name):` around the "
    "region",
    "mark": "NVTX marks are CUDA-only and have no Trainium equivalent: remove it, or time a region with "
    "`torch.profiler.record_function(name)`",
}


#: why `getattr(ProfilerActivity, device_type.upper(), ...)` needs an accelerator where it stands
_WITHOUT_ACCELERATOR = (
    "without an accelerator it is `ProfilerActivity.CPU`, which a list of activities that has it already "
    "makes the profiler reject: use it where an accelerator is present"
)


class CudaNvtx(QualifiedNameRule):
    """NVTX annotations: `torch.cuda.nvtx.range_push/range_pop/range/mark`.

    What it does
    Flags every use of `torch.cuda.nvtx.*`.

    Why it matters on Trainium
    NVTX is NVIDIA's annotation library: the calls fail without a CUDA build ("NVTX functions not installed")
    and Neuron's profiler never sees them. `torch.profiler.record_function(name)` marks a region for the
    PyTorch profiler on any device (and emits NVTX under `torch.autograd.profiler.emit_nvtx()` on CUDA).

    Example
    with torch.cuda.nvtx.range("forward"):
        out = model(x)

    Use instead
    with torch.profiler.record_function("forward"):
        out = model(x)

    Fix safety
    Unsafe for `torch.cuda.nvtx.range(name)` (a context manager or decorator, like `record_function`): the
    program computes the same, but on CUDA the range leaves Nsight Systems timelines unless the run is under
    `torch.autograd.profiler.emit_nvtx()` (it shows in `torch.profiler` traces instead). `range_push`/`range_pop` pairs span
    statements, so turning them into a `with` block is left to a person (no fix), as are `mark`,
    `range_start`/`range_end`, and `range` with format arguments.
    """  # noqa: E501 - rendered verbatim into docs/rules.md

    code = "NM408"
    name = "cuda-nvtx"
    message = "NVTX annotations are CUDA-only: use `torch.profiler.record_function`"
    severity = "warning"
    fix_safety = "unsafe"
    triggers = (b"nvtx",)
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {"torch.cuda.nvtx.*": None}
    VALID = (
        "import torch\nwith torch.profiler.record_function('fwd'):\n    pass\n",
        "import nvtx\nnvtx.push_range('x')\n",  # the standalone `nvtx` package, not torch.cuda.nvtx
    )
    INVALID = (
        Invalid(
            "import torch\nwith torch.cuda.nvtx.range('forward'):\n    out = model(x)\n",
            "import torch\nwith torch.profiler.record_function('forward'):\n    out = model(x)\n",
        ),
        Invalid(
            "from torch.cuda import nvtx\n@nvtx.range(f'step {i}')\ndef step():\n    pass\n",
            "import torch\n@torch.profiler.record_function(f'step {i}')\ndef step():\n    pass\n",
        ),
        Invalid(
            "import torch\ntorch.cuda.nvtx.range_push('step')\nstep()\ntorch.cuda.nvtx.range_pop()\n",
            count=2,
        ),
        Invalid(
            "import torch.cuda.nvtx as nvtx\nnvtx.mark('epoch')\n",
        ),
    )

    def on_use(self, node: cst.Name | cst.Attribute, call: cst.Call | None, name: str) -> None:
        # `name` is the matched pattern `torch.cuda.nvtx.*`; messages and fixes depend on the actual function
        super().on_use(node, call, self.ctx.qualified_name(node) or name)

    def message_for(self, name: str) -> str:
        return _NVTX_MESSAGES.get(name.rsplit(".", 1)[-1], self.message)

    def fix_for(self, node: cst.CSTNode, call: cst.Call | None, name: str) -> FixSpec | None:
        if call is None or not name.endswith(".range") or len(call.args) != 1:
            return None
        arg = call.args[0]
        if arg.star or (arg.keyword is not None and arg.keyword.value != "msg"):
            return None
        text = f"torch.profiler.record_function({self.ctx.code(arg.value)})"
        return FixSpec(
            "Replace `torch.cuda.nvtx.range` with `torch.profiler.record_function`",
            (Replacement(call, text),),
            imports=("torch",),
        )


_ACTIVITY = (
    "torch.profiler.ProfilerActivity",
    "torch._C._profiler.ProfilerActivity",
    "torch.autograd.ProfilerActivity",
    "torch.autograd.profiler.ProfilerActivity",
)


class ProfilerActivityCuda(QualifiedNameRule):
    """`torch.profiler.ProfilerActivity.CUDA`.

    What it does
    Flags `ProfilerActivity.CUDA`, however `ProfilerActivity` was imported.

    Why it matters on Trainium
    With `ProfilerActivity.CUDA` the profiler records CUDA kernels only; on a `neuron` device it warns that
    CUDA is not available and records no device activity. The accelerator's activity is named after its
    device type (`ProfilerActivity.CUDA`, and `ProfilerActivity.NEURON` — an alias of `PrivateUse1` that
    torch adds when the `neuron` backend registers); `torch.profiler.supported_activities()` is the CPU plus
    the available accelerator.

    Example
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        model(x)

    Use instead
    with profile(activities=torch.profiler.supported_activities()) as prof:
        model(x)

    Fix safety
    Safe. A `[CPU, CUDA]` list (or tuple or set) becomes `torch.profiler.supported_activities()`: the same
    set on CUDA, CPU alone without an accelerator (the CUDA activity was dropped with a warning there), and
    CPU plus `neuron` on Trainium. Elsewhere `ProfilerActivity.CUDA` becomes
    `getattr(ProfilerActivity, <device type>.upper(), ProfilerActivity.PrivateUse1)`: `CUDA` on CUDA, `XPU`
    on XPU, and `PrivateUse1`, the activity of a backend registered as `neuron` is, on Trainium (on MPS,
    which has none, the profiler warns and records the CPU, as it did for `CUDA`). Without an accelerator
    the device type is `cpu`, which gives `ProfilerActivity.CPU`, and a list that has it already makes the
    profiler raise: the fix is unsafe unless an accelerator is certain there (nequip's `if
    torch.cuda.is_available(): acts.append(ProfilerActivity.CUDA)`). No fix for a test of the activities
    (`if ProfilerActivity.CUDA in activities: use_device = "cuda"`): what it selects is CUDA's, so the
    accelerator needs its own branch.
    """

    code = "NM409"
    name = "profiler-activity-cuda"
    message = "`ProfilerActivity.CUDA` records CUDA only: use the accelerator's activity"
    severity = "warning"
    fix_safety = "safe"
    triggers = (b"ProfilerActivity",)
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {f"{owner}.CUDA": None for owner in _ACTIVITY}
    VALID = (
        "from torch.profiler import ProfilerActivity\nacts = [ProfilerActivity.CPU]\n",
        "import torch\nacts = torch.profiler.supported_activities()\n",
    )
    INVALID = (
        Invalid(
            "from torch.profiler import ProfilerActivity, profile\n"
            "with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:\n    pass\n",
            "import torch\nfrom torch.profiler import profile\n"
            "with profile(activities=torch.profiler.supported_activities()) as p:\n    pass\n",
        ),
        Invalid(
            "import torch\nacts = [torch.profiler.ProfilerActivity.CPU]\nif torch.cuda.is_available():\n"
            "    acts.append(torch.profiler.ProfilerActivity.CUDA)\n",
            "import torch\nacts = [torch.profiler.ProfilerActivity.CPU]\nif torch.cuda.is_available():\n"
            "    device_type = (torch.accelerator.current_accelerator(check_available=True)"
            ' or torch.device("cpu")).type\n'
            "    acts.append(\n        getattr(torch.profiler.ProfilerActivity, device_type.upper(),"
            " torch.profiler.ProfilerActivity.PrivateUse1)\n    )\n",
        ),
        Invalid(
            "from torch.profiler import ProfilerActivity\nif ProfilerActivity.CUDA in activities:\n"
            "    use_device = 'cuda'\n",
        ),
    )

    def fix_for(self, node: cst.CSTNode, call: cst.Call | None, name: str) -> FixSpec | None:
        if isinstance(self.ctx.parent, (cst.Comparison, cst.ComparisonTarget)):
            return None  # `ProfilerActivity.CUDA in activities` selects CUDA's code (`use_device = "cuda"`)
        display = self.ctx.parent if isinstance(self.ctx.parent, cst.Element) else None
        container = self.ctx.ancestor(2) if display is not None else None
        if isinstance(container, (cst.List, cst.Tuple, cst.Set)) and self._is_cpu_and_cuda(container):
            return FixSpec(
                "Replace the CPU+CUDA activities with `torch.profiler.supported_activities()`",
                (Replacement(container, "torch.profiler.supported_activities()"),),
                imports=("torch",),
            )
        owner = (
            self.ctx.code(node.value)
            if isinstance(node, cst.Attribute)
            else "torch.profiler.ProfilerActivity"
        )
        text = f"getattr({owner}, {DEVICE_TYPE}.upper(), {owner}.PrivateUse1)"
        certain = accelerator_certain(self.ctx)
        return FixSpec(
            "Replace `ProfilerActivity.CUDA` with the current accelerator's activity",
            (Replacement(node, text),),
            imports=("torch",),
            safety=None if certain else "unsafe",
            caution="" if certain else _WITHOUT_ACCELERATOR,
        )

    def _is_cpu_and_cuda(self, container: cst.List | cst.Tuple | cst.Set) -> bool:
        members = set()
        for element in container.elements:
            if not isinstance(element, cst.Element):
                return False
            owner, _, member = (self.ctx.qualified_name(element.value) or "").rpartition(".")
            if owner not in _ACTIVITY:
                return False
            members.add(member)
        return members == {"CPU", "CUDA"} and len(container.elements) == 2
