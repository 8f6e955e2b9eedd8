"""Why a safe fix needs a person's review (`settle`, step 2): each reason makes the fix unsafe and is said in
its message. A fix that
- sits in a parameter's default (the function's interface, computed at import);
- names the device in a command-line or class-level default of a module that launches work on a Ray cluster
  (the launching host's accelerator is not the workers');
- needs `import torch` in a module that imports torch only inside its functions (an optional or heavy
  dependency);
- makes a test's skip condition generic, or a test module's device (at its top), or writes what TorchScript
  cannot run into code it may compile;
- makes code generic that works with a library whose kernels are the CPU's and CUDA's only;
- makes a check generic whose answer is a callee's GPU switch (`gpu=`, `use_gpu=`);
- widens a check around code MPS cannot run (pinning memory, moving float64 data, synchronizing a stream), or
  names the device in a function that works in float64 (MPS has none);
- makes code generic in a module that keeps other accelerators apart;
- lets neuron into a device test that its function returns as one condition of a policy (`return mode ==
  "auto" and device.type == "cuda"`: its callers act on it);
- saves or restores generator states that a checkpoint carries (poutyne's `{"cuda":
  torch.cuda.get_rng_state_all()}` in a `torch.save`): a state saved on one accelerator type goes into
  another's generator when the checkpoint moves;
- writes a `torch.accelerator` memory function for a project that supports a torch older than 2.13 (they
  raise on MPS before it), or a computed autocast device for one older than 2.5 (no MPS autocast before it).
"""

from __future__ import annotations

import re
from itertools import pairwise

import libcst as cst

from neuron_migrate.migrate.api_versions import MEMORY_FUNCTIONS
from neuron_migrate.migrate.chains import after_device_branches, other_device_named
from neuron_migrate.migrate.cuda_files import cpu_and_cuda_library
from neuron_migrate.migrate.device_neutral import flag_side
from neuron_migrate.migrate.fixes import FixStyle
from neuron_migrate.migrate.imports import lazy_import
from neuron_migrate.migrate.names import dotted
from neuron_migrate.migrate.naming import scope_of
from neuron_migrate.migrate.patterns import keyword
from neuron_migrate.migrate.rules.float64 import makes_float64, spells_float64
from neuron_migrate.migrate.test_gates import SKIP_GATE, is_test_module, skip_gate
from neuron_migrate.migrate.torchscript import AUTOCAST_RULES, SCRIPTED, scripted_scope
from neuron_migrate.migrate.walk import find, innermost_function

_DEFAULT = (
    "a parameter's default is part of the function's interface and is computed when the function is "
    "defined, at import: pass the device from the callers, or default to `None` and look it up in the body"
)


_PER_DEVICE = (
    "the module treats other accelerators apart (`{other}`): its CUDA code is CUDA's part, and {what}; "
    "review it, or add a `neuron` part"
)


_PER_DEVICE_WHAT = {
    True: "the fixed test sends neuron there too",
    False: "a generic rewrite changes what they do too",
}


def caution(ctx, pending, style: FixStyle) -> str | None:
    """Why a safe fix needs review, or None (the reasons are listed in the module's docstring)."""
    if _in_parameter_default(pending.stack):
        return _DEFAULT
    if (
        pending.fix.uses_device
        and _setting_default(pending.stack)
        and (cluster := ctx.once(_CLUSTER, lambda: _CLUSTER.search(ctx.source)))
    ):
        return _CLUSTER_DEFAULT.format(cluster=cluster.group(0))
    if "torch" in pending.fix.imports and (lazy := lazy_import("torch", ctx, pending.stack)) is not None:
        return _LAZY_IMPORT.format(lazy=lazy)
    if pending.fix.generalizes and (gate := skip_gate(ctx, pending.stack)) is not None:
        return SKIP_GATE.format(gate=gate)
    if pending.fix.generalizes and (name := _test_module_device(ctx, pending.stack)) is not None:
        return _TEST_MODULE_DEVICE.format(name=name)
    if (scope := scripted_scope(ctx, pending, style.torchscript)) is not None:
        return SCRIPTED.format(scope=scope)
    if pending.rule.generator_state and (saved := _checkpointed(ctx, pending.stack)) is not None:
        return _CHECKPOINTED_RNG.format(saved=saved)
    if pending.fix.generalizes and (library := cpu_and_cuda_library(ctx, pending.stack)) is not None:
        return _CPU_AND_CUDA.format(library=library)
    if pending.fix.generalizes and (cannot := _mps_cannot(ctx, pending)) is not None:
        return cannot
    if pending.fix.generalizes and (switch := _gpu_switch(ctx, pending.stack)) is not None:
        return _GPU_SWITCH.format(keyword=switch[0], callee=switch[1])
    if (on_mps := _raises_on_older_mps(pending, style.target_torch)) is not None:
        return on_mps
    if pending.fix.generalizes and (load := _load_as_saved(ctx, pending)) is not None:
        return _LOAD_AS_SAVED.format(load=load)
    if pending.fix.uses_device and (marker := _float64_function(ctx, pending.stack)) is not None:
        return _MPS_FLOAT64.format(marker=marker)
    if (
        pending.fix.generalizes
        and (other := other_device_named(ctx)) is not None
        and not after_device_branches(ctx, pending.stack)
    ):
        return _PER_DEVICE.format(other=other, what=_PER_DEVICE_WHAT[pending.widens_test])
    if pending.widens_test and (function := _returned_policy(pending.stack)) is not None:
        return _RETURNED_TEST.format(function=function)
    return None


_CHECKPOINTED_RNG = (
    "the states go through a checkpoint (`{saved}`): saved on one accelerator type (MPS, neuron) and "
    "restored on another, CUDA among them, a state now goes into the wrong generator and fails, where the "
    "CUDA calls saved nothing off CUDA; store the device type beside the states and restore only on a match"
)
#: what writes or reads a checkpoint: `torch.save` / `torch.load`, or a method named for state that a
#: checkpoint carries (`state_dict`, `load_state_dict`, Megatron's RNG tracker's `get_states` / `set_states`)
_CHECKPOINT_CALLS = ("torch.save", "torch.load")
_CHECKPOINT_FUNCTION = re.compile(r"state_dict|checkpoint|^(?:get|set|save|load)_(?:rng_)?states?$")


def _checkpointed(ctx, stack: tuple[cst.CSTNode, ...]) -> str | None:
    """The checkpoint the generator states at the end of `stack` go through, as text: a `torch.save` or
    `torch.load` in their function, or the function's name (`state_dict`, `set_states`)."""
    function = innermost_function(stack)
    if function is None:
        return None
    if _CHECKPOINT_FUNCTION.search(function.name.value):
        return f"def {function.name.value}"
    for call in find(function, cst.Call):
        if ctx.call_name(call) in _CHECKPOINT_CALLS:
            return f"{ctx.call_name(call)}(...)"
    return None


_TEST_MODULE_DEVICE = (
    "it picks the device of a test module's tests (`{name}`, at its top): made generic, they move to the "
    "accelerator of MPS and XPU hosts (CI runners among them) where they ran on the CPU; check that the "
    "tests are device-generic, or keep this CUDA's and add `neuron`"
)


def _test_module_device(ctx, stack: tuple[cst.CSTNode, ...]) -> str | None:
    """The name a test module (`test_*.py`, `*_test.py`) assigns at its top level with the code at the end of
    `stack`: torchao's `_DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")`, which every
    test places on and `skipIf(_DEVICE == "cpu", ...)` tests, and `DEVICES = {torch.device("cpu"), ...}`,
    which 15 test loops run over (review 40 #117, #118)."""
    if not is_test_module(ctx.path) or len(stack) < 2:
        return None
    statement = stack[1]
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and statement.body else None
    if not isinstance(small, (cst.Assign, cst.AnnAssign)):
        return None
    target = small.targets[0].target if isinstance(small, cst.Assign) else small.target
    return dotted(target)


_GPU_SWITCH = (
    "its value is the `{keyword}=` argument of `{callee}(...)`, which decides what a GPU is there (faiss's "
    "`gpu=` asks for NVIDIA GPUs): check that it handles neuron"
)
#: a keyword that switches a callee's GPU path on (`gpu=`, `use_gpu=`, `on_cuda=`; not a count, `num_gpus=`)
_GPU_KEYWORD = re.compile(r"^(?:(?:use|on|with|enable|is)_)?(?:gpu|cuda)$", re.IGNORECASE)
#: the expressions a test's answer passes through on its way to be an argument's value
_ANSWER_PARTS = (cst.IfExp, cst.BooleanOperation, cst.UnaryOperation, cst.Comparison)


def _gpu_switch(ctx, stack: tuple[cst.CSTNode, ...]) -> tuple[str, str] | None:
    """(the keyword, the callee), as text, when the code at the end of `stack` decides the value of a keyword
    argument that names a GPU: pytorch-metric-learning's `FaissKMeans(niter=20, gpu=self.device.type ==
    "cuda")` (review 39 #24), torchao's `faiss.Kmeans(..., gpu=True if torch.cuda.is_available() else
    False)` (review 40 #168), or through a name its function passes there, itself or as a loop's variable
    (torchao's `is_cuda_options = [True, False] if torch.cuda.is_available() else [False]`, then `for is_cuda
    in is_cuda_options:` and `helper(..., is_cuda=is_cuda)`, whose pattern inputs are moved with `.cuda()`:
    review 40 #172)."""
    for index in range(len(stack) - 2, 0, -1):
        parent, child = stack[index], stack[index + 1]
        if isinstance(parent, cst.Arg):
            call = stack[index - 1]
            if parent.value is not child or parent.keyword is None or not isinstance(call, cst.Call):
                return None
            keyword = parent.keyword.value
            return (keyword, ctx.code(call.func).strip()) if _GPU_KEYWORD.search(keyword) else None
        if isinstance(parent, cst.Assign) and parent.value is child:
            target = parent.targets[0].target if len(parent.targets) == 1 else None
            return _named_switch(ctx, stack[:index], target.value) if isinstance(target, cst.Name) else None
        own_call = isinstance(parent, cst.Call) and parent.func is child  # `torch.cuda.is_available()`
        if not own_call and not isinstance(parent, _ANSWER_PARTS):
            return None
    return None


def _named_switch(ctx, stack: tuple[cst.CSTNode, ...], name: str) -> tuple[str, str] | None:
    """(the keyword, the callee) of a GPU switch the function around the end of `stack` (else the module)
    passes `name`, or the variable of a `for` loop over it, to."""
    scope = next((node for node in reversed(stack) if isinstance(node, cst.FunctionDef)), ctx.module)
    names = {name} | {
        loop.target.value
        for loop in find(scope, cst.For)
        if isinstance(loop.target, cst.Name) and isinstance(loop.iter, cst.Name) and loop.iter.value == name
    }
    for call in find(scope, cst.Call):
        for arg in call.args:
            if (
                arg.keyword is not None
                and isinstance(arg.value, cst.Name)
                and arg.value.value in names
                and _GPU_KEYWORD.search(arg.keyword.value)
            ):
                return arg.keyword.value, ctx.code(call.func).strip()
    return None


_MPS_CANNOT = (
    "the code it guards {what} (`{call}`), which raises on MPS ({why}): made generic, the check sends Apple "
    'hosts into it; keep MPS out (`acc is not None and acc.type != "mps"`, `acc` the current accelerator) or '
    "check"
)


#: what MPS cannot do: (what the guarded code does, why it fails there)
_MPS_CANNOT_WHAT = {
    "pin_memory": ("pins host memory", "torch's DataLoader turns pinning off there"),
    "float64": ("moves float64 data to the device", "it has no float64"),
    # torch 2.13's MPSGuardImpl keeps the base class's synchronizeStream / queryStream, which raise
    "stream": (
        "synchronizes or queries a stream",
        "its streams cannot be; `torch.accelerator.synchronize()` can wait for the device",
    ),
}


_CPU_AND_CUDA = (
    "the code works with `{library}`, whose kernels run on the CPU and CUDA only: check that the device this "
    "makes generic never reaches it (on Trainium its tensors stay on the CPU, or its ops are ported)"
)


_CLUSTER_DEFAULT = (
    "the module launches work on a cluster (`{cluster}`): a default computed here names the launching "
    "host's accelerator, which may have none, not the workers'; keep the workers' device in the default, or "
    "look it up where the work runs"
)


#: code that sends work to other machines (Ray: GLiNER's serve CLI with its `--ray-address`)
_CLUSTER = re.compile(r"\bimport ray\b|\bfrom ray\b|\bray_address\b|--ray-address|\bray\.init\(")


def _setting_default(stack: tuple[cst.CSTNode, ...]) -> bool:
    """Whether the node at the end of `stack` is (in) the default of a command-line option
    (`add_argument(..., default=...)`) or of a class-level field (a dataclass's `device: str = "cuda"`)."""
    for parent, child in pairwise(stack):
        if isinstance(parent, cst.Arg) and parent.value is child and _keyword(parent) == "default":
            func = getattr(stack[stack.index(parent) - 1], "func", None)
            if isinstance(func, cst.Attribute) and func.attr.value == "add_argument":
                return True
        if isinstance(parent, (cst.AnnAssign, cst.Assign)) and parent.value is child:
            at = stack.index(parent)
            return at >= 3 and isinstance(stack[at - 3], cst.ClassDef)
    return False


def _keyword(arg: cst.Arg) -> str | None:
    return arg.keyword.value if arg.keyword is not None else None


def _in_parameter_default(stack: tuple[cst.CSTNode, ...]) -> bool:
    """Whether the node at the end of `stack` is (in) the default value of a function's parameter."""
    return any(isinstance(parent, cst.Param) and parent.default is child for parent, child in pairwise(stack))


def _mps_cannot(ctx, pending) -> str | None:
    """Why MPS cannot run the code an availability check guards, made generic with `torch.accelerator`
    (also through the flag it is assigned to), or None: it pins host memory (torchani's `pin_memory =
    torch.cuda.is_available()` then `if pin_memory: ds.pin_memory()`; `DataLoader(pin_memory=...)` is no such
    call: the loader skips MPS itself), or moves a float64 value to the device (fairseq's `ratios =
    torch.DoubleTensor(ratios)`, then `ratios.cuda()`)."""
    if not _lets_any_accelerator_in(pending):
        return None  # `in ("cuda", "neuron")` lets no MPS in
    scope = scope_of(pending.stack)
    for node in (*pending.region, *flag_side(ctx, pending)):
        for call in find(node, cst.Call):
            if not isinstance(call.func, cst.Attribute):
                continue
            method = call.func.attr.value
            if method == "pin_memory":
                what, why = _MPS_CANNOT_WHAT["pin_memory"]
            elif method in ("cuda", "to") and _bound_to(ctx, call.func.value, scope, makes_float64):
                what, why = _MPS_CANNOT_WHAT["float64"]
            elif method in ("synchronize", "query") and _bound_to(
                ctx, call.func.value, scope, lambda value: _makes_cuda_stream(ctx, value)
            ):
                what, why = _MPS_CANNOT_WHAT["stream"]
            else:
                continue
            return _MPS_CANNOT.format(what=what, call=ctx.excerpt(call, 40), why=why)
    return None


_RETURNED_TEST = (
    "its answer is what `{function}` returns: what its callers do with it on neuron (compile, pin, count "
    "devices) is decided there, where it was measured or written for CUDA; check them"
)


def _returned_policy(stack: tuple[cst.CSTNode, ...]) -> str | None:
    """The name of the function that returns the device test at the end of `stack` as one condition of a
    policy, in an `and` / `or` with others (unsloth's `return mode in ("loss", "full") or (auto and
    torch.device(device).type == "cuda")`: whether to compile the loss, review 42 #22), or None. A bare
    predicate (`return x.device.type == "cuda"`) only says where a tensor is."""
    combined = False
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if isinstance(node, cst.Return):
            function = innermost_function(stack[:index])
            return function.name.value if combined and function is not None else None
        if not isinstance(node, (cst.BooleanOperation, cst.UnaryOperation)):
            return None
        combined = combined or isinstance(node, cst.BooleanOperation)
    return None


def _lets_any_accelerator_in(pending) -> bool:
    """Whether the fix makes a check guard its code for any accelerator (`torch.accelerator`), not for a list
    of device types (`in ("cuda", "neuron")`)."""
    return bool(pending.region) and any("torch.accelerator" in r.text for r in pending.fix.replacements)


#: the first torch whose `torch.accelerator` memory functions work on MPS: its allocator became a
#: `c10::DeviceAllocator` there (pytorch#186748; `class IMPSAllocator : public c10::DeviceAllocator` in 2.13's
#: headers). From 2.9 to 2.12 each of them raises on a Mac ("Allocator for mps is not a DeviceAllocator",
#: pytorch#186430), availability guard or not, since MPS is the available accelerator
MEMORY_ON_MPS_FROM = (2, 13)
#: the first torch with an MPS autocast (pytorch#99272): before it, `torch.autocast("mps", ...)` raises, also
#: with `enabled=False` (transformers#29431, torch 2.2 and 2.3), where `autocast("cuda")` only warned on a Mac
AUTOCAST_ON_MPS_FROM = (2, 5)
_RAISES_ON_OLDER_MPS = (
    "before torch {since} {what}, where {cuda}, and the fix is written for torch {target}: apply "
    "it if the code never runs on a Mac with an older torch, or set `target-torch` to {since}"
)


def _raises_on_older_mps(pending, target: tuple[int, int]) -> str | None:
    """Why a fix raises on MPS with the project's oldest torch, where the CUDA code did not, or None: it
    writes a `torch.accelerator` memory function (before 2.13) or a computed autocast device (before 2.5)."""
    memory = next((api for api in MEMORY_FUNCTIONS for r in pending.fix.replacements if api in r.text), None)
    if target < MEMORY_ON_MPS_FROM and memory is not None:
        since, what, cuda = MEMORY_ON_MPS_FROM, f"`{memory}` raises on MPS", "the CUDA call did nothing"
    elif target < AUTOCAST_ON_MPS_FROM and pending.rule.code in AUTOCAST_RULES:
        since, cuda = AUTOCAST_ON_MPS_FROM, "the CUDA one only warned on a Mac"
        what = "an autocast raises for an MPS device, `enabled=False` too"
    else:
        return None
    return _RAISES_ON_OLDER_MPS.format(
        since=".".join(map(str, since)), what=what, cuda=cuda, target=".".join(map(str, target))
    )


_LOAD_AS_SAVED = (
    "the code it lets in loads a checkpoint as it was saved (`{load}`, no `map_location`): on CUDA that "
    "restores CUDA tensors, and on another accelerator a file saved from CUDA fails to load where the CPU "
    "branch mapped it: pass `map_location` there"
)


def _load_as_saved(ctx, pending) -> str | None:
    """A `torch.load(...)` without `map_location` in the code an availability check guards (mmagic's
    DeblurGAN-v2: `torch.load(pretrained)` with CUDA, `map_location='cpu'` without), as text, or None."""
    if not _lets_any_accelerator_in(pending):
        return None
    for node in pending.region[1:]:
        for call in find(node, cst.Call):
            if (
                ctx.call_name(call) == "torch.load"
                and len(call.args) < 2
                and keyword(call, "map_location") is None
            ):
                return ctx.excerpt(call, 40)
    return None


_LAZY_IMPORT = (
    "the module imports torch only inside functions (`{lazy}`), and the fix needs it here: a new top-level "
    "`import torch` would load it whenever the module is imported; import it where this code runs"
)


_MPS_FLOAT64 = (
    "the function works in float64 (`{marker}`), and the device this picks is MPS on Apple hosts, which has "
    'no float64 (where it picked the CPU before): keep MPS out (`acc is not None and acc.type != "mps"`, '
    "`acc` the current accelerator) or check"
)


def _float64_function(ctx, stack) -> str | None:
    """The first spelling of float64 (`rules.float64.spells_float64`: `torch.float64`, `.double()`,
    `"float64"`) in the outermost function around a fix that names the device (mace's `device or ("cuda" if
    ... else "cpu")` beside `default_dtype="float64"`), or None."""
    function = next((node for node in stack if isinstance(node, cst.FunctionDef)), None)
    if function is None:
        return None
    found = next((node for node in find(function, _SPELLINGS) if spells_float64(node)), None)
    return ctx.code(found) if found is not None else None


#: the node classes float64 is spelled with
_SPELLINGS = (cst.Attribute, cst.Call, cst.SimpleString)


def _bound_to(ctx, value: cst.BaseExpression, scope: cst.CSTNode, makes) -> bool:
    """Whether `makes(value)`, or `value` is a name every assignment of which in `scope` is such a value (a
    parameter it replaces does not count: `x = x.double()`)."""
    if isinstance(value, cst.Name):
        bound = [b for b in ctx.bindings.in_scope(value.value, scope) if b.kind != "param"]
        return bool(bound) and all(b.value is not None and makes(b.value) for b in bound)
    return makes(value)


#: the calls that make (or return) a CUDA stream
_CUDA_STREAMS = frozenset(
    {
        "torch.cuda.current_stream",
        "torch.cuda.default_stream",
        "torch.cuda.Stream",
        "torch.cuda.streams.Stream",
    }
)


def _makes_cuda_stream(ctx, value: cst.BaseExpression) -> bool:
    """Whether `value` is a call that makes or returns a CUDA stream (`torch.cuda.current_stream()`)."""
    return isinstance(value, cst.Call) and ctx.call_name(value) in _CUDA_STREAMS
