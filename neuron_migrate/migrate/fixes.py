"""What a rule hands back as a fix, before positions are known: replacements, imports, safety.

A leaf module (it imports only the shared records, and libcst only for its annotations), so the rule base,
the file context and the analyzer can all use it without importing each other, and a scan whose results all
come from the cache can use `FixStyle` without importing libcst.

Replacement texts may hold two placeholders for the one device idiom, resolved per scope after the file's
traversal (`naming.py`): `DEVICE` (the current accelerator, CPU when there is none) and `DEVICE_TYPE` (its
type string). A scope that needs the device more than once, or where the inline idiom would not fit the line,
gets one binding (`device = ...`) and every placeholder becomes that name; a lone use stays inline. `DEVICE`
stands where an `or` expression may (a whole argument or value), `DEVICE_ATOM` where it needs parentheses
(`device_literals.fit` picks), `DEVICE_TYPE` is an atom anywhere. A fix whose text cannot hold the inline
idiom (inside an f-string) sets `needs_name`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from neuron_migrate.migrate.layout import Layout
from neuron_migrate.migrate.torch_floor import DEFAULT_TARGET_TORCH
from neuron_migrate.model import FixSafety

if TYPE_CHECKING:
    import libcst as cst

#: the one device expression the rewrites use: an accelerator when there is one, else the CPU
DEVICE_EXPR = 'torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")'
#: its device *type* as a string ("cuda", "neuron", "cpu"), for APIs that take `device_type`
DEVICE_TYPE_EXPR = f"({DEVICE_EXPR}).type"
#: the device where an accelerator is certain
CERTAIN_DEVICE_EXPR = "torch.accelerator.current_accelerator()"
#: the test that an accelerator is present (guards for calls that raise without one)
AVAILABLE = "torch.accelerator.is_available()"
#: the line a rewrite puts before a statement that must only run with an accelerator
AVAILABILITY_GUARD = f"if {AVAILABLE}:"

# Private-use characters: they never occur in real source, so a placeholder cannot collide with user text.
DEVICE = "\ue000device\ue001"
DEVICE_ATOM = "\ue000(device)\ue001"  # the device where an `or` expression needs parentheses
DEVICE_TYPE = "\ue000device_type\ue001"
PLACEHOLDERS = (DEVICE, DEVICE_ATOM, DEVICE_TYPE)
#: what only accelerator-generic code writes (see `FixSpec.generalizes`)
_GENERIC = re.compile(r"torch\.accelerator\.|torch\.(?:Event|Stream)\b|[\"'](?:cpu|neuron:?)[\"']|\ue000")


@dataclass(frozen=True)
class Replacement:
    """Part of a fix: replace `node`'s source text with `text` (positions are resolved after the
    traversal)."""

    node: cst.CSTNode
    text: str


@dataclass(frozen=True)
class Insertion:
    """Part of a fix: new lines above `statement` (above its decorators and the comments directly over it),
    at its indentation; `text` has no indentation and may span lines (continuations indented by 4)."""

    statement: cst.CSTNode
    text: str


@dataclass(frozen=True)
class FixSpec:
    """A fix before positions are known: replacements plus the imports the new code needs (`"torch"`, …).

    `safety` None means the rule's declared `fix_safety`. `needs_name`: the device placeholders in this fix
    must become a name (the inline idiom cannot go where they stand). `caution`: what a person must check
    before applying an unsafe fix (said in the finding's message). `relies_on`: the APIs (`api_versions.SINCE`
    keys) the new code uses without spelling them (`with s:` enters a `torch.Stream`)."""

    title: str
    replacements: tuple[Replacement, ...]
    imports: tuple[str, ...] = ()
    safety: FixSafety | None = None
    needs_name: bool = False
    insertions: tuple[Insertion, ...] = ()
    caution: str = ""
    relies_on: tuple[str, ...] = ()

    @property
    def uses_device(self) -> bool:
        """Whether any replacement names the device (holds a placeholder)."""
        return any(p in r.text for r in self.replacements for p in PLACEHOLDERS)

    @property
    def generalizes(self) -> bool:
        """Whether the new code serves another accelerator where the old served CUDA: it calls
        `torch.accelerator`, names the device, makes a `torch.Event` / `torch.Stream`, tests against the CPU
        (`!= "cpu"`) or lets neuron in beside CUDA (`in ("cuda", "neuron")`). Not so a removal, or a rewrite
        that keeps CUDA (`torch.amp.GradScaler("cuda")`)."""
        return any(_GENERIC.search(part.text) for part in (*self.replacements, *self.insertions))


def inline(text: str) -> str:
    """`text` with every placeholder written out as the idiom itself."""
    return (
        text.replace(DEVICE_ATOM, f"({DEVICE_EXPR})")
        .replace(DEVICE, DEVICE_EXPR)
        .replace(DEVICE_TYPE, DEVICE_TYPE_EXPR)
    )


def inline_certain(text: str) -> str:
    """`text` with every placeholder written out where an accelerator is certain (under `if
    torch.accelerator.is_available():`): the device has no CPU fallback there, since it could never be
    taken. Its type keeps the whole idiom: `current_accelerator()` is typed `torch.device | None`, and a type
    checker rejects `.type` on it."""
    return inline(text.replace(DEVICE_ATOM, CERTAIN_DEVICE_EXPR).replace(DEVICE, CERTAIN_DEVICE_EXPR))


_DEFAULT_LAYOUT = Layout()


@dataclass(frozen=True)
class FixStyle:
    """What shapes the fixes of one file: the project's layout (line length, formatter), whether unsafe
    fixes will be applied (only applied fixes count when deciding to name the device), the first-party module
    names (for import grouping) and the oldest torch the fixed code must run on (`torch_floor`: where the
    project declares it, when that is where it came from; `default_torch` when nothing said and the target
    is the default). `include_generated`: fix files marked generated
    too (`generated.py`). `torchscript`: the scanned project guards code for TorchScript
    (`torch.jit.is_scripting()`), so its modules are meant to script (`torchscript.py`).
    `deepspeed_accelerator`: the project writes device code with DeepSpeed's accelerator abstraction (at
    least a quarter as many of its files import `deepspeed.accelerator` as mention CUDA: DeepSpeed itself,
    not transformers' one integration module), which its fixes should use (`settle`). `stale_import`: for a
    file that cannot be imported (`stale_imports.py`), the import that fails, the missing module it leads
    to, and whether the import is that of an enclosing package: it is not fixed. `kernel_modules`: the
    project's modules that define GPU kernels with a CUDA-only library (`kernel_modules.py`), as (dotted name
    from the scan's root, library): code that uses them stays CUDA's (`cuda_files.project_kernel`)."""

    layout: Layout = _DEFAULT_LAYOUT
    unsafe: bool = False
    include_generated: bool = False
    torchscript: bool = False
    deepspeed_accelerator: bool = False
    stale_import: tuple[str, str, bool] = ("", "", False)
    kernel_modules: tuple[tuple[str, str], ...] = ()
    local_modules: frozenset[str] = frozenset()
    target_torch: tuple[int, int] = DEFAULT_TARGET_TORCH
    torch_floor: str = ""
    #: the target is the default: neither `target-torch` nor the project says (`fix` says so)
    default_torch: bool = False
    #: where the project caps torch below the torch TorchNeuron needs (`torch<2.7` in ...), if it does
    torch_cap: str = ""

    @property
    def line_length(self) -> int:
        return self.layout.line_length

    @property
    def cache_key(self) -> str:
        """What of the style changes a file's findings, for the scan cache."""
        project = f"{int(self.torchscript)}{int(self.deepspeed_accelerator)}:{self.stale_import}"
        if self.kernel_modules:
            project += ":" + hashlib.sha1(repr(self.kernel_modules).encode()).hexdigest()[:12]
        return f"{self.line_length}:{self.target_torch}:{self.torch_floor}:{project}"
