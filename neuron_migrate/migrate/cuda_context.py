"""Where code only runs on CUDA, so its CUDA calls are right as they are (used by `settle`).

A fix is withdrawn, with a note saying why, when its code:

- is in a file, or inside a function or class, whose name says it is about CUDA or one of its libraries
  (`torch/cuda/memory.py`, `cuda_utils.py`, `torch/backends/cudnn/rnn.py`, `def cuda(self)`,
  `is_torch_cuda_available`, `_nccl_algo_time`: `cuda_files.cuda_named`), in a module whose docstring
  says it requires CUDA, or in a
  module that drives a CUDA-only library (`accelerate/utils/megatron_lm.py`: `cuda_files`) or defines
  kernels with one (`@triton.jit`: `kernel_modules`), or in a function that uses a name imported from the
  project's own kernel module (`from .kernels import fused_add`), itself or through its module's helpers;
- only runs when a test that is about CUDA and stays CUDA's holds: the body of an `if`/`while`/conditional
  whose test mentions CUDA in code no fix of this run rewrites (`elif is_torch_cuda_available():`,
  `if len(torch.cuda.default_generators) > 0:`, `if backend == "nccl":`), the `else` of such a test when it
  is negated (`not ...`, `!=`, `not in`), and the code after such a negated test that exits (`if
  device.type != "cuda": raise ...`); when that precondition is a statement of a function's body, the whole
  function is CUDA's (anywhere else it ends in the `raise`);
- is in a branch of a per-device `if`/`elif` chain that has a branch for `neuron` (Trainium takes that one),
  or in the `GPU` branch of a test that tells devices apart (`DistributedType.MULTI_GPU` next to `MULTI_XPU`);
- is under a comment that says it is CUDA-only ("right now, only CUDA is implemented") or names NVIDIA's
  kernel templates ("CuTe-DSL kernel", CUTLASS), or is the test of an `if` whose body opens with a comment
  naming the CUDA library it tunes for (cuDNN, cuBLAS, tensor cores);
- is in the test of an `if` that raises saying the code is CUDA-only ("currently implemented for CUDA"):
  the check is the code's CUDA requirement;
- is in a function that itself asks NVIDIA's driver or interconnect (`_has_nvlink()`, NVML, nvidia-smi);
- is in a function that requires a CUDA-only library, or in a function or class defined in one: imports it
  in its body (`import bitsandbytes as bnb`, or in an `if` whose other branch exits, or in a `try` whose
  handlers import it again or exit) or calls it there unconditionally, or in a block that calls one
  (`smp.local_rank()` under `elif is_sagemaker_mp_enabled():`); so does a function that activates one of
  torch's FlashAttention implementations (FA3, FA4: CUDA kernels), also in a `with`, `try` or loop body;
- is in a function that keeps CUDA graph code (a finding of a `Rule.cuda_design` rule left without a fix):
  the function is ported as a whole when a person removes the capture (a to-do);
- is in a test a decorator runs only with CUDA (`@skip_if_lt_x_gpu(2)`, `@onlyCUDA`, a `skipIf` whose reason
  names CUDA or NVIDIA hardware: `skipIf(not _is_hopper(), "Requires ... Hopper GPU")`), in a test module
  that skips itself without CUDA (`pytest.skip(..., allow_module_level=True)`, `pytestmark`), or in a
  function whose only callers are such tests (distributed_test's `_test_*` helpers; a method is matched by
  its name);
- is in a function that calls other devices' own modules too (`torch.mps.manual_seed(seed)` after
  `torch.cuda.manual_seed_all(seed)`): per-device code, where each device has its part (a to-do: add
  `neuron`'s if it needs one);
- is in, or after, a statement of its block that calls a function of the module that requires CUDA by its
  precondition (`client.init_communicator(device="cuda")`, matched by name);
- is an argument of CUDA-only code that stays
  (`torch.cuda.get_device_properties(torch.cuda.current_device())`), or of CUDA code left for a person
  (`DistributedDataParallel(model.cuda(rank), device_ids=[rank])` while its unsafe `device_ids` fix waits:
  a to-do, changed together);
- is CUDA's by what its call pairs it with: CUDA-only facts, a process-group backend, other device types
  given to the same function; or is a CUDA function stored in a table, not called (`cuda_neighbours`);
- is the function under a `"cuda"` key of a dict (a per-device dispatch table,
  `{"cuda": torch.cuda.synchronize, "xpu": ...}`: each device has its own entry).

All but the last, the per-device functions, CUDA graph code and arguments of code left for a person need no
change (the finding becomes a note), also a finding that came without a fix and with only its rule's advice
(poutyne's `self.network.cuda(*args, **kwargs)` inside its own `Model.cuda()`); not a CUDA-only library's
import, whose porting is work whatever runs it. "Mentions CUDA" means a name or attribute containing `cuda`,
`nvidia`, `cublas`, `cudnn`, `nccl` or NVIDIA's embedded CUDA platforms (`jetson`, `tegra`), a call of a
function whose name contains `gpu`, a string containing `cuda`, `gpu`, `nvidia`, `nccl` or `EGL_DEVICE` (the
GPU that renders through EGL), or a CUDA-only library or capability name (`patterns.CUDA_ONLY_CODE`, ROCm/HIP
and TensorPipe's device maps included), outside the code that the fixes applied in this run replace. A
*strong* mention (what keeps a precondition's check CUDA's, `settle`) leaves out what people also say of any
accelerator: `cuda` and `gpu` in names and messages ("needs a CUDA GPU").
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import NamedTuple

import libcst as cst

from neuron_migrate.migrate.call_sites import calls_in
from neuron_migrate.migrate.chains import CHAIN_NOTE, chain_of_tests, chain_tests, names_neuron
from neuron_migrate.migrate.context import shortened
from neuron_migrate.migrate.cuda_files import (
    cuda_extension,
    cuda_file,
    cuda_kernel_registry,
    cuda_named,
    library_module,
    project_kernel,
    requires_cuda,
)
from neuron_migrate.migrate.cuda_libraries import library_of
from neuron_migrate.migrate.cuda_neighbours import paired_with_cuda, stored_in_table
from neuron_migrate.migrate.device_literals import is_cuda_string, literal_value, string_value
from neuron_migrate.migrate.guards import conjuncts, disjuncts, exits, implies
from neuron_migrate.migrate.kernel_modules import kernel_library
from neuron_migrate.migrate.names import dotted
from neuron_migrate.migrate.patterns import CUDA_ONLY_CODE
from neuron_migrate.migrate.rules.libraries import imported_library
from neuron_migrate.migrate.test_gates import module_skip, skipif_mark
from neuron_migrate.migrate.walk import find, innermost_function, statements, walk

#: EGL_DEVICE_ID picks the GPU that renders through EGL (MuJoCo, dm_control): a GPU's index, not an
#: accelerator's
_STRING_CUE = re.compile(r"cuda|gpu|nvidia|nccl|egl_device", re.IGNORECASE)
#: Jetson and Tegra are NVIDIA's embedded CUDA platforms (torch's `IS_JETSON`)
_NAME_CUE = re.compile(r"cuda|nvidia|cublas|cudnn|nccl|jetson|(?<![a-z])tegra", re.IGNORECASE)
_STRONG_NAME_CUE = re.compile(r"nvidia|cublas|nccl|jetson|(?<![a-z])tegra", re.IGNORECASE)
#: in a message, what only CUDA has: NCCL, and CUDA's capabilities (compute capability, its device
#: properties: "Roofline estimation needs to access CUDA capabilities", torch's runtime estimator)
_STRONG_STRING_CUE = re.compile(r"nccl|cuda\s+capabilit", re.IGNORECASE)
_GPU = re.compile(r"(?<![a-z])gpus?(?![a-z])", re.IGNORECASE)
_GPU_IN_NAME = re.compile("gpu", re.IGNORECASE)
#: "only on CUDA", "CUDA-only", CUDA named with ROCm's HIP, its one other backend ("makes sure this is
#: CUDA or HIP": torch's SVD meta function conjugates for what cuSOLVER and hipSOLVER return), and NVIDIA's
#: kernel templates, CUDA's by nature (a "CuTe-DSL kernel", CUTLASS)
_CUDA_ONLY_COMMENT = re.compile(
    r"\bonly\s+(?:(?:\w+\s+){0,2}?(?:on|in|for|with)\s+)?cuda\b|\bcuda[\s-]only\b"
    r"|\bonly\s+supports?\s+cuda\b|\bimplemented\s+(?:only\s+)?(?:for|on|in|with)\s+cuda\b"
    r"|\bcuda\s*(?:or|/)\s*(?:hip|rocm)\b"
    r"|(?-i:\bCuTe\b)|\bcutlass\b",
    re.IGNORECASE,
)
#: callee names that query NVIDIA's driver or interconnect: NVLink, NVSwitch, NVML, nvidia-smi (not a
#: capability predicate such as `is_nvidia_sm100_or_later()`, which gates one path of a generic function)
_NVIDIA_QUERY = re.compile(r"nvlink|nvswitch|nvml|nvidia_?smi", re.IGNORECASE)
#: names of test decorators that run a test only with CUDA: `onlyCUDA`, `requires_nccl`, `require_torch_gpu`,
#: `skip_if_lt_x_gpu`, `skipIfNoCuda`, `skip_if_no_gpu`
_GATE_NAME = re.compile(
    r"^only_?cuda|^cuda_?only|^(requires?|needs?)_?\w*(cuda|gpu|nccl|nvfuser|cudnn)|"
    r"^skip_?if_?(no|lt_?x)_?\w*(cuda|gpu)",
    re.IGNORECASE,
)
_ACCELERATE_GPU = re.compile(r"\bDistributedType\.MULTI_GPU\b")
_FUNCTIONS = (cst.FunctionDef, cst.Lambda)
_NEGATIONS = (cst.NotEqual, cst.NotIn, cst.IsNot)


#: the function a call of another device's own runtime module calls (`torch.mps.manual_seed`)
_OTHER_DEVICE_FUNCTION = re.compile(r"torch\.(?:mps|xpu|hpu|npu|mtia|mlu|musa|backends\.mps)\.[\w.]+")


class CudaOnly(NamedTuple):
    """Why code only runs on CUDA; `needs_change` when a person still has something to do there."""

    reason: str
    needs_change: bool = False


class CudaMentions:
    """Answers "does this code mention CUDA" outside the nodes `covered` (those the applied fixes replace) and
    outside availability tests (`torch.cuda.is_available()`, `x.is_cuda`, `d.type == "cuda"`: the device
    rules rewrite those, or keep them as CUDA checks, themselves)."""

    def __init__(self, ctx, covered: set[int], kernel_modules: tuple[tuple[str, str], ...] = ()) -> None:
        self.ctx = ctx
        self.covered = covered
        self.kernel_modules = kernel_modules  # the project's own kernel modules (`FixStyle.kernel_modules`)
        self.libraries: dict[int, str | None] = {}  # per function: the CUDA-only library it requires
        self.cuda_functions: set[str] | None = None  # the module's functions that require CUDA, by name
        self.cuda_calls: dict[int, str | None] = {}  # per statement: the one of those it calls
        self.module_library: tuple[str | None] | None = None  # the CUDA-only library the module drives
        self.docstring_requires_cuda: bool | None = None
        self.extension_source: tuple[str | None] | None = None
        self.module_kernels: tuple[str | None] | None = None
        self.block_libraries: dict[int, str | None] = {}  # per block: the CUDA-only library it drives
        self.recorded_calls: dict[int, str | None] | None = None
        self.other_devices: dict[tuple[int, int], str | None] = {}  # per function and chain: such a call
        self.nvidia_queries: dict[int, str] | None = None  # per function: an NVIDIA query it calls itself
        self.gates: bool | None = None  # whether a function or class of the module is a CUDA-gated test
        self.cuda_kernels: tuple[str | None] | None = None  # the CUDA key the module's kernels are for

    def find(
        self,
        node: cst.CSTNode,
        strong: bool = False,
        names_only: bool = False,
        skip: cst.CSTNode | None = None,
    ) -> str | None:
        """The first CUDA mention in `node`, as text, or None; `strong`: only strong mentions; `names_only`:
        only in names (`ProcessGroupNCCL`), not in strings (`mode="max-autotune-no-cudagraphs"`); not in
        `skip` (a check's own test, whose `"cuda"` is what it compares with)."""
        found: list[str] = []
        covered, ctx = self.covered, self.ctx
        name_cue = _STRONG_NAME_CUE if strong else _NAME_CUE
        string_cue = _STRONG_STRING_CUE if strong else _STRING_CUE

        class Finder(cst.CSTVisitor):
            def __init__(self) -> None:
                super().__init__()
                self.chain: list[cst.Attribute] = []  # the dotted name being walked, to name it whole

            def on_leave(self, original_node: cst.CSTNode) -> None:
                if self.chain and self.chain[0] is original_node:
                    self.chain.clear()

            def on_visit(self, child: cst.CSTNode) -> bool:
                if found or child is skip:
                    return False
                if id(child) in covered:  # a rewritten call keeps its arguments' names: `cuda_rng_state`
                    if isinstance(child, cst.Call):  # still says CUDA after the rewrite
                        found.extend(_cuda_named_arguments(child, name_cue)[:1])
                    return False
                if (
                    isinstance(child, (cst.Call, cst.Attribute, cst.Comparison))
                    and implies(ctx, child)[0] == "certain"
                ):
                    return False
                text = None
                if isinstance(child, cst.Name) and (
                    name_cue.search(child.value) or CUDA_ONLY_CODE.search(child.value)
                ):
                    text = dotted(self.chain[0]) if self.chain else child.value  # `torch.cuda._sleep`
                elif (key := _keyword_key(child)) and (name_cue.search(key) or CUDA_ONLY_CODE.search(key)):
                    text = key  # `{"fused": ...}`: keyword arguments in a dict, as `fused=...` spells them
                elif not strong and isinstance(child, cst.Call) and "gpu" in _callee(child).lower():
                    # `is_torch_bf16_gpu_available()`: a GPU capability query; not `gpu_devices.append(d)`
                    text = ctx.code(child.func)
                elif isinstance(child, cst.SubscriptElement) and (key := _identifier(child.slice)):
                    # a key names a setting: "GPU" in it says "an accelerator", as in `args.use_gpu`
                    # (`config["use_gpu"]`); CUDA's names still count (`environ["EGL_DEVICE_ID"]`)
                    if (
                        name_cue.search(key)
                        or string_cue.search(_GPU_IN_NAME.sub("", key))
                        or CUDA_ONLY_CODE.search(key)
                    ):
                        text = key
                    else:
                        return False
                elif (
                    not names_only
                    and isinstance(child, (cst.SimpleString, cst.FormattedStringText))
                    and (string_cue.search(child.value) or (strong and CUDA_ONLY_CODE.search(child.value)))
                ):
                    text = child.value.strip("'\"")
                if text is not None:
                    found.append(shortened(text, 40))
                    return False
                if not self.chain and isinstance(child, cst.Attribute) and dotted(child):
                    self.chain.append(child)
                return True

        walk(node, Finder())
        return found[0] if found else None

    def calls_cuda_function(self, statement: cst.CSTNode) -> str | None:
        """The name of a function of this module that requires CUDA (a CUDA precondition among its body's
        statements) which `statement` calls (`client.init_communicator(device="cuda")`), if any."""
        if self.cuda_functions is None:
            self.cuda_functions = _cuda_functions(self.ctx, self)
        if not self.cuda_functions or isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            return None  # defining a function calls nothing
        key = id(statement)
        if key not in self.cuda_calls:
            names = (_callee_name(call) for call in _calls_in(statement))
            self.cuda_calls[key] = next((n for n in names if n in self.cuda_functions), None)
        return self.cuda_calls[key]

    def library_module(self) -> str | None:
        """The CUDA-only library this module is the integration of (`cuda_files.library_module`), if any."""
        if self.module_library is None:
            self.module_library = (library_module(self.ctx.module, self.ctx.path),)
        return self.module_library[0]

    def call_names(self) -> dict[int, str | None]:
        """The qualified names the walk resolved for the calls it recorded, by call id (built once)."""
        if self.recorded_calls is None:
            self.recorded_calls = {id(call): name for call, name in self.ctx.calls}
        return self.recorded_calls

    def block_library(self, block: cst.IndentedBlock) -> str | None:
        """The CUDA-only library a statement of `block` imports or calls (`smp.local_rank()` in the branch
        of `elif is_sagemaker_mp_enabled():`), if any: the block only runs where that library does."""
        key = id(block)
        if key not in self.block_libraries:
            self.block_libraries[key] = _block_library(self, block.body)
        return self.block_libraries[key]

    def kernel_registry(self) -> str | None:
        """The devices the module registers its kernels for, when CUDA and at most the CPU
        (`cuda_files.cuda_kernel_registry`)."""
        if self.cuda_kernels is None:
            self.cuda_kernels = (cuda_kernel_registry(self.ctx.source),)
        return self.cuda_kernels[0]

    def cuda_extension(self) -> str | None:
        """The CUDA source the module builds its own kernels from (`cuda_files.cuda_extension`), if any."""
        if self.extension_source is None:
            self.extension_source = (cuda_extension(self.ctx),)
        return self.extension_source[0]

    def kernel_library(self) -> str | None:
        """The CUDA-only library the module defines kernels with (`kernel_modules.kernel_library`), if any."""
        if self.module_kernels is None:
            self.module_kernels = (kernel_library(self.ctx.source.encode()),)
        return self.module_kernels[0]

    def requires_cuda(self) -> bool:
        """Whether the module's docstring says it requires CUDA (`cuda_files.requires_cuda`)."""
        if self.docstring_requires_cuda is None:
            self.docstring_requires_cuda = requires_cuda(self.ctx.module)
        return self.docstring_requires_cuda

    def callers_gate(self, function: cst.FunctionDef) -> str | None:
        """The gate of the callers of `function` when it has some and every one is a test that a decorator
        runs only with CUDA (distributed_test's `_test_*` helpers of `@skip_if_lt_x_gpu(2)` tests)."""
        if self.gates is None:  # no gated test in the module: no caller can be one (spares the call sites)
            holders = (
                s for s in statements(self.ctx.module) if isinstance(s, (cst.FunctionDef, cst.ClassDef))
            )
            self.gates = any(self._gate(holder) for holder in holders)
        if not self.gates:
            return None
        callers = dict.fromkeys(
            site.caller() for site in calls_in(self.ctx).sites.get(function.name.value, ())
        )
        gates = [self._gate(caller) or (self._gate(owner) if owner else None) for caller, owner in callers]
        return gates[0] if gates and all(gates) else None

    def _gate(self, holder: cst.FunctionDef | cst.ClassDef | None) -> str | None:
        """The decorator of `holder` that runs it only with CUDA, as text, if any."""
        for decorator in holder.decorators if holder is not None else ():
            if _gates_on_cuda(self, decorator.decorator) or _registers_cuda_function(decorator.decorator):
                return self.ctx.excerpt(decorator.decorator)
        return None

    def other_device_call(self, function: cst.FunctionDef, chain: cst.If | None) -> str | None:
        """A call of another device's own runtime module in `function` outside the `if` chain `chain`
        (`torch.mps.manual_seed(seed)`), if any: the function handles each device by its module. Inside the
        chain, its tests decide (`if is_xpu_available(): torch.xpu.empty_cache() else: <CUDA or nothing>`)."""
        key = (id(function), id(chain))
        if key not in self.other_devices:
            self.other_devices[key] = _other_device_call(function, chain)
        return self.other_devices[key]

    def nvidia_query(self, function: cst.FunctionDef) -> str | None:
        """The name of a function `function` calls itself (not in a nested function) that queries NVIDIA's
        driver or interconnect (`_has_nvlink()`, `pynvml.nvmlInit()`, `nvidia_smi(...)`), if any: torch's
        `detect_interconnect` models NVLink and InfiniBand topologies from the GPU count it asks CUDA for.
        The module's call sites are read once, and only when its text names such a query."""
        if self.nvidia_queries is None:
            self.nvidia_queries = {}
            named = _NVIDIA_QUERY.search(self.ctx.source) is not None  # else no call's name can match
            for name, sites in calls_in(self.ctx).sites.items() if named else ():
                if _NVIDIA_QUERY.search(name):
                    for site in sites:
                        caller = site.caller()[0]
                        if caller is not None:
                            self.nvidia_queries.setdefault(id(caller), name)
        return self.nvidia_queries.get(id(function))

    def required_library(self, function: cst.FunctionDef) -> str | None:
        """The CUDA-only library `function` cannot run without (see the module docstring), if any."""
        key = id(function)
        if key not in self.libraries:
            self.libraries[key] = _required_library(self, function)
        return self.libraries[key]


def covered_nodes(pendings: list, applies) -> set[int]:
    """ids of every node inside the replacement nodes of the fixes this run applies."""
    covered: set[int] = set()
    for pending in pendings:
        if applies(pending):
            for replacement in pending.fix.replacements:
                covered |= nodes_under(replacement.node)
    return covered


def _an_alternative_without_cuda(mentions: CudaMentions, test: cst.BaseExpression, taken: bool) -> bool:
    """Whether the body of `if a or b:` (`taken`) runs on an alternative that says nothing of CUDA:
    pytorch-tabular's `if (is_oom_runtime_error or is_cuda_oom_error) and ...:` handles any device's out of
    memory (review 49)."""
    if not taken:
        return False
    for part in conjuncts(test):
        if isinstance(part, cst.BooleanOperation) and isinstance(part.operator, cst.Or):
            alternatives = disjuncts(part)
            if any(mentions.find(a) is None for a in alternatives) and any(
                mentions.find(a) is not None for a in alternatives
            ):
                return True
    return False


def names_cuda(name: str) -> bool:
    """Whether an identifier says CUDA in its name (`is_cuda`, `_has_cuda_val`, `use_nccl`), as opposed to
    naming a CUDA-only capability (`flash_attn_available`, `_fused`)."""
    return bool(_NAME_CUE.search(name))


def nodes_under(node: cst.CSTNode) -> set[int]:
    """ids of `node` and every node inside it."""
    found: set[int] = set()

    class Collect(cst.CSTVisitor):
        def on_visit(self, child: cst.CSTNode) -> bool:
            found.add(id(child))
            return True

    walk(node, Collect())
    return found


def negative(ctx, test: cst.BaseExpression) -> bool:
    """Whether a test is true when the device is *not* the one it names (`not ...`, `d.type != "cuda"`,
    `"cuda" not in str(d)`, `torch.cuda.device_count() == 0`)."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return True
    if (
        isinstance(test, cst.Comparison)
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].operator, _NEGATIONS)
    ):
        return True
    when_true, when_false = implies(ctx, test)
    return when_false == "certain" and when_true != "certain"


def cuda_precondition(ctx, statement: cst.CSTNode, mentions: CudaMentions) -> str | None:
    """For `if <not CUDA>: raise/return ...` without an `else`, whose test stays CUDA's: what in the test
    says CUDA. The code after it only runs on CUDA."""
    if not (
        isinstance(statement, cst.If)
        and statement.orelse is None
        and exits(statement.body)
        and negative(ctx, statement.test)
        and not _lists_other_values(statement.test)
    ):
        return None
    return mentions.find(statement.test)


def _lists_other_values(test: cst.BaseExpression) -> bool:
    """`d not in ("cpu", "gpu", "xpu", ...)`: a membership test in a list that names more than CUDA."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return False
    listed = [test.left, test.comparisons[0].comparator]
    elements = [
        e.value for node in listed if isinstance(node, (cst.List, cst.Tuple, cst.Set)) for e in node.elements
    ]
    return any(not (isinstance(e, cst.SimpleString) and _STRING_CUE.search(e.value)) for e in elements)


def only_on_cuda(pending, mentions: CudaMentions, leftovers: list, path: str = "") -> CudaOnly | None:
    """Why the code of `pending` only runs on CUDA (see the module docstring), or None."""
    if cuda_file(path):
        return CudaOnly("the file is about CUDA by its name: leave it, or port it by hand")
    if (library := mentions.library_module()) is not None:
        return CudaOnly(
            f"the module drives `{library}`, a CUDA-only library (it or its folder is named after it): no "
            "change needed"
        )
    if (library := mentions.kernel_library()) is not None:
        return CudaOnly(
            f"the module defines `{library}` kernels, which run only on NVIDIA GPUs: no change needed"
        )
    if mentions.requires_cuda():
        return CudaOnly("the module's docstring says it requires CUDA: no change needed")
    if (devices := mentions.kernel_registry()) is not None:
        return CudaOnly(
            f"the module registers its operators' kernels for {devices} only (`impl(...)`): its code serves "
            "them; port the operators to give it another device (no change needed here)"
        )
    if (kernel := mentions.cuda_extension()) is not None:
        return CudaOnly(
            f"the module builds its own CUDA kernels (`{kernel}`, with `torch.utils.cpp_extension`): its "
            "code serves them; port the kernels to give it another device (no change needed here)"
        )
    stack = pending.stack
    start = next((i for i in range(len(stack) - 1, -1, -1) if isinstance(stack[i], _FUNCTIONS)), 0)
    function = stack[start] if isinstance(stack[start], cst.FunctionDef) else None
    # the named function around a lambda too (mmpose's `def cuda(self): ... lambda x: x.cuda()`; Dynamo's
    # cleanup hook `lambda: torch.cuda.set_device(prev)`)
    named = innermost_function(stack)
    if named is not None and cuda_named(named.name.value):
        return CudaOnly(
            f"it is in `{named.name.value}`, which is about CUDA by its name: leave it, or rename the "
            "function and port it by hand"
        )
    if function is not None:
        if (library := _library_around(mentions, stack)) is not None:
            return CudaOnly(f"its function requires `{library}`, which is CUDA-only: no change needed")
        if (kernel := project_kernel(mentions.ctx, stack, mentions.kernel_modules)) is not None:
            name, module, library = kernel
            return CudaOnly(
                f"its function uses `{name}` from `{module}`, which defines `{library}` kernels that run "
                "only on NVIDIA GPUs: port them to give it another device (no change needed here)"
            )
        if (query := mentions.nvidia_query(function)) is not None:
            return CudaOnly(
                f"its function asks NVIDIA's driver or topology (`{query}()`), which Trainium does not have: "
                "no change needed"
            )
        if (design := _cuda_design_in(mentions.ctx, function, leftovers)) is not None:
            return CudaOnly(
                f"its function keeps CUDA graph code (`{design}`), which has no Trainium counterpart: port "
                "the function as a whole when that code is removed",
                True,
            )
        if (other := mentions.other_device_call(function, _outermost_if(stack, start))) is not None:
            return CudaOnly(
                f"its function also calls other devices' own modules, such as `{other}`: per-device code, "
                "where CUDA's part stays; add a `neuron` part if it needs one",
                True,
            )
    if (owner := _cuda_named_class(stack)) is not None:
        return CudaOnly(
            f"it is in class `{owner}`, which is about CUDA by its name: leave it, or port it by hand"
        )
    if (base := _cuda_library_base(mentions.ctx, stack)) is not None:
        return CudaOnly(
            f"its class extends `{base.rsplit('.', 1)[-1]}` from `{library_of(base)}`, a CUDA-only library, "
            "and runs where that does: no change needed (port the class off it)"
        )
    if (gate := _cuda_gate(mentions, stack, leftovers)) is not None:
        return CudaOnly(f"a test decorator runs it only with CUDA (`@{gate}`): no change needed")
    if (gate := _module_gate(mentions, stack, leftovers)) is not None:
        return CudaOnly(f"the test module only runs with CUDA (`{gate}`): no change needed")
    if (handled := _cuda_handler(mentions.ctx, stack)) is not None:
        return CudaOnly(
            f"it is registered as the handler of a CUDA function (`@{handled}`): no change needed"
        )
    if named is not None and (gate := mentions.callers_gate(named)) is not None:
        return CudaOnly(f"only code that runs with CUDA calls its function (`@{gate}`): no change needed")
    ctx = mentions.ctx
    for index in range(start, len(stack) - 1):
        parent, child = stack[index], stack[index + 1]
        if isinstance(parent, (cst.If, cst.While, cst.IfExp)) and child is not parent.test:
            in_true_branch = child is parent.body
            if (
                in_true_branch != negative(ctx, parent.test)
                and not _an_alternative_without_cuda(mentions, parent.test, in_true_branch)
                and (
                    cue := mentions.find(parent.test)
                    or _gpu_among_devices(ctx, stack, index)
                    or _kept_cuda_test(ctx, parent.test, mentions.covered, leftovers)
                )
            ):
                return CudaOnly(f"it only runs when a CUDA test holds (`{cue}`): no change needed")
            if isinstance(parent, cst.If) and _in_chain_with_neuron(ctx, stack, index, in_true_branch):
                return CudaOnly(CHAIN_NOTE)
        elif (
            isinstance(parent, cst.For)
            and child is parent.body
            and (chosen := _chosen_for_cuda(ctx, stack, index))
        ):
            return CudaOnly(f"it loops over what `{chosen}` chose for CUDA: no change needed")
        elif isinstance(parent, (cst.IndentedBlock, cst.Module)):
            if isinstance(parent, cst.IndentedBlock) and (library := mentions.block_library(parent)):
                return CudaOnly(f"its block drives `{library}`, a CUDA-only library: no change needed")
            whole_function = index == start + 1 and function is not None
            for statement in parent.body if whole_function else parent.body[: parent.body.index(child)]:
                if statement is not child and (cue := cuda_precondition(ctx, statement, mentions)):
                    where = "its function requires" if whole_function else "it runs after a check for"
                    return CudaOnly(f"{where} CUDA (`{cue}`): no change needed")
            for statement in parent.body[: parent.body.index(child) + 1]:
                if (called := mentions.calls_cuda_function(statement)) is not None:
                    return CudaOnly(
                        f"it runs with or after `{called}()`, which requires CUDA: no change needed"
                    )
        elif (
            isinstance(parent, cst.DictElement)
            and child is parent.value
            and isinstance(child, (cst.Name, cst.Attribute))
            and isinstance(parent.key, cst.SimpleString)
            and (literal_value(parent.key) == "cuda")
        ):
            return CudaOnly(
                "it is CUDA's entry of a per-device table: add an entry for the accelerator instead", True
            )
    if (paired := paired_with_cuda(ctx, stack, mentions.covered)) is not None:
        return CudaOnly(*paired)
    if (table := stored_in_table(ctx, stack, pending.node)) is not None:
        return CudaOnly(*table)
    if (comment := _cuda_only_comment(stack[start:])) is not None:
        return CudaOnly(f"a comment says it is CUDA's (`{comment}`): no change needed")
    if (message := _cuda_only_precondition(stack[start:])) is not None:
        return CudaOnly(f"the check says the code after it is CUDA's (`{message}`): no change needed")
    for leftover in leftovers:
        if leftover is not pending and leftover.node in stack and leftover.node is not pending.node:
            if leftover.no_change:
                return CudaOnly("it is an argument of CUDA-only code that stays: no change needed")
            return CudaOnly(
                f"it is an argument of CUDA-only code left for a person (`{ctx.excerpt(leftover.node)}`): "
                "change them together",
                True,
            )
    return None


def _cuda_design_in(ctx, function: cst.FunctionDef, leftovers: list) -> str | None:
    """A finding left in `function` that is a CUDA design with no Trainium counterpart (`Rule.cuda_design`:
    CUDA graph capture), as text: the stream and device code around a capture exists for it (torch's
    symmetric memory checks `is_current_stream_capturing()` next to its stream calls)."""
    for leftover in leftovers:
        if getattr(leftover.rule, "cuda_design", False) and function in leftover.stack:
            return shortened(ctx.code(leftover.node), 40)
    return None


def _cuda_library_base(ctx, stack) -> str | None:
    """The qualified name of a base class from a CUDA-only library of a class around the code: galore-torch's
    `AdamW8bit(Optimizer2State)` synchronizes after bitsandbytes' CUDA update step (review 44)."""
    for parent, child in pairwise(stack):
        if isinstance(parent, cst.ClassDef) and child is parent.body:
            for base in parent.bases:
                name = ctx.qualified_name(base.value) if base.keyword is None else None
                if name is not None and library_of(name) is not None:
                    return name
    return None


def _cuda_named_class(stack) -> str | None:
    """The name of a class around the code that says it is about CUDA (`CudaDdpComparisonTest`)."""
    for parent, child in pairwise(stack):
        if isinstance(parent, cst.ClassDef) and child is parent.body and cuda_named(parent.name.value):
            return parent.name.value
    return None


def _cuda_gate(mentions: CudaMentions, stack, leftovers: list = ()) -> str | None:
    """A decorator of a function or class around the code that runs it only with CUDA (`onlyCUDA`,
    `requires_nccl()`, `skip_if_lt_x_gpu(2)`, `unittest.skipIf(not TEST_CUDA, ...)`,
    `unittest.skipUnless(TEST_CUDA, ...)`, `pytest.mark.skipif(not torch.cuda.is_available(), ...)`), as
    source text. `skipCUDAIf...` (skip on CUDA when ...) and
    `skipIfRocm` are not gates; a gate the run rewrites (`skipIf(not torch.cuda.is_available())`) is no
    longer CUDA's and does not count, where a gate whose CUDA check this run leaves (`leftovers`: an unsafe
    fix not applied) does."""
    for _, expression in _decorators_around(stack):
        if _gates_on_cuda(mentions, expression, leftovers):
            return mentions.ctx.excerpt(expression)
    return None


def _module_gate(mentions: CudaMentions, stack, leftovers: list) -> str | None:
    """The statement, as text, that skips the whole test module without CUDA, when the code at the end of
    `stack` comes after it: `if not (torch.cuda.is_available() and _is_sm_10x()): pytest.skip(...,
    allow_module_level=True)` (torchao's MoE kernel tests, review 40), or `pytestmark =
    pytest.mark.skipif(...)` anywhere in the module, on the terms of a test decorator (`_cuda_condition`)."""
    ctx = mentions.ctx
    skips = ctx.once(_module_skips, lambda: _module_skips(ctx.module) if "skip" in ctx.source else [])
    top = stack[1] if len(stack) > 1 else None
    for index, statement, skip in skips:
        if isinstance(statement, cst.If):
            after = statement is not top and ctx.module.body.index(top) > index
            if after and _cuda_condition(mentions, statement.test, True, _reason(skip), leftovers):
                return ctx.excerpt(statement.test)
        elif _gates_on_cuda(mentions, skip, leftovers):
            return ctx.excerpt(skip)
    return None


def _module_skips(module: cst.Module) -> list[tuple[int, cst.CSTNode, cst.Call]]:
    """(index, statement, skip call) of the module's top-level statements that may skip the whole module: an
    `if` without `else` whose body skips it (`test_gates.module_skip`), a `pytestmark` `skipif` mark."""
    found = []
    for index, statement in enumerate(module.body):
        if isinstance(statement, cst.If) and statement.orelse is None:
            skip = module_skip(statement.body)
        else:
            skip = skipif_mark(statement)
        if skip is not None:
            found.append((index, statement, skip))
    return found


def _cuda_handler(ctx, stack) -> str | None:
    """A decorator of a function around the code that registers it for CUDA functions only, as text:
    Dynamo's `@register(torch.cuda._exchange_device)` handler traces CUDA's own device switch."""
    for holder, expression in _decorators_around(stack):
        if isinstance(holder, cst.FunctionDef) and _registers_cuda_function(expression):
            return ctx.excerpt(expression, 60)
    return None


def _decorators_around(stack):
    """(function or class, decorator expression) for every decorated definition whose body holds the code
    at the end of `stack`, outermost first."""
    for parent, child in pairwise(stack):
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)) and child is parent.body:
            for decorator in parent.decorators:
                yield parent, decorator.decorator


def _registers_cuda_function(expression: cst.BaseExpression) -> bool:
    """`@register(torch.cuda._exchange_device, ...)`: a decorator call whose arguments are all functions of
    `torch.cuda` (named, not called)."""
    return (
        isinstance(expression, cst.Call)
        and bool(expression.args)
        and all(
            (dotted(arg.value) or "").startswith("torch.cuda.") and not arg.keyword for arg in expression.args
        )
    )


def _gates_on_cuda(mentions: CudaMentions, expression: cst.BaseExpression, leftovers: list = ()) -> bool:
    call = expression if isinstance(expression, cst.Call) else None
    name = (dotted(call.func if call else expression) or "").rsplit(".", 1)[-1]
    if _GATE_NAME.search(name):
        return True
    if call is None or not call.args or name not in ("skipIf", "skipif", "skipUnless"):
        return False
    return _cuda_condition(
        mentions, call.args[0].value, name in ("skipIf", "skipif"), _reason(call), leftovers
    )


def _cuda_condition(
    mentions: CudaMentions, condition: cst.BaseExpression, skips: bool, reason: str, leftovers: list
) -> bool:
    """Whether a skip condition (`skips`: the test is skipped when it holds, else when it does not) lets the
    test run only with CUDA: it mentions CUDA or holds a CUDA check this run leaves, or its reason names
    CUDA or NVIDIA hardware ("FP8 SDPA requires CUDA and FA3", "Requires ... Hopper GPU") beside a
    condition that runs the test when it holds (`skipIf(not _is_hopper(), ...)`) and that this run does not
    rewrite (a rewritten `torch.cuda.is_available()` runs the test on any accelerator, whatever it says)."""
    runs = implies(mentions.ctx, condition)[1 if skips else 0]
    if runs == "certain" and (mentions.find(condition) is not None or _holds_any(condition, leftovers)):
        return True  # `skipIf(torch.cuda.device_count() < 2, ...)`: runs with two CUDA devices or more
    negated = isinstance(condition, cst.UnaryOperation) and isinstance(condition.operator, cst.Not)
    if negated != skips:
        return False  # skipIf(TEST_CUDA) and skipUnless(not TEST_CUDA) run without CUDA
    tested = condition.expression if negated else condition
    if mentions.find(tested) is not None or _holds_any(tested, leftovers):
        return True
    rewritten = any(id(node) in mentions.covered for node in (tested, *find(tested, cst.CSTNode)))
    return not rewritten and _CUDA_HARDWARE.search(reason) is not None


#: a skip reason that names CUDA or NVIDIA hardware: the test needs it, not just any accelerator
_CUDA_HARDWARE = re.compile(
    r"\bcuda\b|\bnvidia\b|\bhopper\b|\bblackwell\b|\bampere\b|\bsm\s?_?\d{2,3}|\bsm\s?\d{1,2}\.\d|"
    r"\b[abh]\d00\b|\bcompute capability\b",
    re.IGNORECASE,
)


def _reason(call: cst.Call) -> str:
    """The reason a skip decorator or call gives (its second positional argument, or `reason=` / `msg=`), or
    ""."""
    for index, arg in enumerate(call.args):
        keyword = arg.keyword.value if arg.keyword is not None else None
        if keyword in ("reason", "msg") or (keyword is None and index == 1):
            return string_value(arg.value) or ""
    return ""


def _holds_any(node: cst.CSTNode, pendings: list) -> bool:
    """Whether `node` is, or holds, the node of one of `pendings`."""
    wanted = {id(pending.node) for pending in pendings}
    return any(id(inner) in wanted for inner in find(node, cst.CSTNode))


def _chosen_for_cuda(ctx, stack, index: int) -> str | None:
    """For the `for` loop at `stack[index]` over a plain name: the call named after CUDA that gives the name
    its value in the nearest function that binds it (its other values empty containers), as text. torch's
    compiled autograd moves `for i in runtime_inputs_to_move:` to CUDA, a list only
    `self.move_graph_nodes_to_cuda(...)` fills: the loop only ever runs for CUDA."""
    loop = stack[index]
    if not isinstance(loop.iter, cst.Name):
        return None
    for scope in reversed([node for node in stack[:index] if isinstance(node, cst.FunctionDef)]):
        values = [binding.value for binding in ctx.bindings.in_scope(loop.iter.value, scope)]
        if not values:
            continue
        calls = [v for v in values if isinstance(v, cst.Call)]
        empty = [v for v in values if isinstance(v, (cst.List, cst.Tuple)) and not v.elements]
        callees = [dotted(call.func) or "" for call in calls]
        if (
            calls
            and len(calls) + len(empty) == len(values)
            and all(cuda_named(c.rsplit(".", 1)[-1]) for c in callees)
        ):
            return f"{callees[0]}(...)"
        return None
    return None


def _kept_cuda_test(ctx, test: cst.BaseExpression, covered: set[int], leftovers: list) -> str | None:
    """A test that a value is a CUDA string (`"cuda" in device_types`, `kind == "cuda"`, alone or `and`-ed)
    that is no finding of this run, as text. What it guards runs only when the value names CUDA: torch's
    checkpoint returns `"cuda"` when `"cuda" in device_types_set`, the device its tensors are on. A test
    that is a finding is rewritten (then what it guards is too) or left for a person (held back for the
    project's torch, say: what it guards is then held back with it, not code that needs no change)."""
    for part in conjuncts(test):
        if (
            isinstance(part, cst.Comparison)
            and id(part) not in covered
            and len(part.comparisons) == 1
            and isinstance(part.comparisons[0].operator, (cst.Equal, cst.In))
            and any(is_cuda_string(side) for side in (part.left, part.comparisons[0].comparator))
            and not any(id(node) in covered for node in (part.left, part.comparisons[0].comparator))
            and not any(part in pending.stack or part is pending.node for pending in leftovers)
        ):
            return shortened(ctx.code(part), 40)
    return None


def _gpu_among_devices(ctx, stack, index: int) -> str | None:
    """`GPU` in the test of `stack[index]`, in a chain of tests that tells devices apart."""
    test = stack[index].test
    tests = chain_tests(stack, index) if isinstance(stack[index], cst.If) else [test]
    return gpu_among_devices(ctx, test, tests)


def gpu_among_devices(ctx, test: cst.BaseExpression, tests: list[cst.BaseExpression]) -> str | None:
    """`GPU` in `test` when `tests` (its chain, or itself) tell devices apart (`elif state.distributed_type ==
    DistributedType.MULTI_GPU` after `MULTI_XPU`, `XLA and is_torch_xla_available(check_is_gpu=True)`): there
    it means CUDA, where elsewhere (`if args.gpu:`) it means any accelerator. Accelerate's
    `DistributedType.MULTI_GPU` is CUDA's anywhere (XPU, NPU, Neuron, ... have members of their own)."""
    code = ctx.code(test)
    if _ACCELERATE_GPU.search(code):
        return "DistributedType.MULTI_GPU"
    word = next((w for w in re.findall(r"\w+", code) if _GPU.search(w)), None)
    return word if word is not None and chain_of_tests(ctx, tests) is not None else None


def _callee(call: cst.Call) -> str:
    """The name a call calls, without what it is looked up on: `append` for `gpu_devices.append(d)`."""
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else ""


def _keyword_key(node: cst.CSTNode) -> str | None:
    """The identifier a dict entry's string key spells (`{"fused": True}`, keyword arguments passed as
    `**kwargs`), else None."""
    return _identifier(node.key) if isinstance(node, cst.DictElement) else None


def _identifier(node: cst.CSTNode | None) -> str | None:
    """The identifier a plain string literal (or a subscript's index holding one) spells, else None."""
    value = string_value(node.value if isinstance(node, cst.Index) else node)
    return value if value is not None and value.isidentifier() else None


def _cuda_only_comment(stack) -> str | None:
    """A comment above (or after) a statement around the node that says the code is CUDA-only ("right now,
    only CUDA is implemented"), or, for a node in the test of an `if`, one that opens its body and names the
    CUDA library the body tunes for (sheeprl: `if fabric.device.type == "cuda":  # The convolutions of cuDNN
    run in the channels-last layout ...`)."""
    for index, node in enumerate(stack):
        comments = [
            (line.comment, _CUDA_ONLY_COMMENT) for line in getattr(node, "leading_lines", ()) if line.comment
        ]
        trailing = getattr(node, "trailing_whitespace", None)
        if trailing is not None and trailing.comment is not None:
            comments.append((trailing.comment, _CUDA_ONLY_COMMENT))
        if isinstance(node, cst.If) and index + 1 < len(stack) and stack[index + 1] is node.test:
            comments.extend((comment, _CUDA_LIBRARY_COMMENT) for comment in _opening_comments(node.body))
        for comment, says in comments:
            if says.search(comment.value):
                return shortened(comment.value.lstrip("# ").strip(), 40)
    return None


def _cuda_only_precondition(stack) -> str | None:
    """For a node in the test of an `if` that raises, the raise's message when it says the code is CUDA-only
    in the words of `_CUDA_ONLY_COMMENT` (MONAI's `if not torch.cuda.is_available(): raise
    NotImplementedError("GaussianMixtureModel is currently implemented for CUDA.")`, before it builds its
    CUDA extension): the check is the code's CUDA requirement, and made generic it would send neuron into
    the CUDA build."""
    for node, child in pairwise(stack):
        if not (isinstance(node, cst.If) and child is node.test and isinstance(node.body, cst.IndentedBlock)):
            continue
        for statement in node.body.body:
            raised = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
            if isinstance(raised, cst.Raise) and isinstance(raised.exc, cst.Call) and raised.exc.args:
                message = string_value(raised.exc.args[0].value)
                if message is not None and _CUDA_ONLY_COMMENT.search(message):
                    return shortened(message, 40)
    return None


#: a comment naming a CUDA library whose performance code tunes for (cuDNN's layouts and algorithms,
#: cuBLAS's math modes, tensor cores)
_CUDA_LIBRARY_COMMENT = re.compile(
    r"\bcu(?:dnn|blas(?:lt)?|fft|sparse)\b|\btensor[\s-]?cores?\b", re.IGNORECASE
)


def _opening_comments(body: cst.BaseSuite) -> list[cst.Comment]:
    """The comments after a block's colon and above its first statement."""
    if not isinstance(body, cst.IndentedBlock):  # `if x: y` has neither
        return []
    comments = [body.header.comment] if body.header.comment is not None else []
    if body.body:
        comments.extend(line.comment for line in body.body[0].leading_lines if line.comment)
    return comments


def _in_chain_with_neuron(ctx, stack, index: int, in_body: bool) -> bool:
    """Whether `stack[index]` (an `If`) is part of a per-device chain with a `neuron` branch, and the branch
    at `stack[index + 1]` is not that one (an `elif` is the next `If` of the chain, not a branch)."""
    branch = stack[index + 1]
    if not in_body and isinstance(branch, cst.If):
        return False
    if in_body and names_neuron(ctx, stack[index].test):
        return False
    chain = chain_of_tests(ctx, chain_tests(stack, index))
    return chain is not None and chain.has_neuron


def _cuda_functions(ctx, mentions: CudaMentions) -> set[str]:
    """Names of the module's functions and methods whose body has a CUDA precondition (names defined once:
    a call is matched by name only)."""
    defined: dict[str, int] = {}
    requiring: set[str] = set()
    for statement in statements(ctx.module):  # functions are defined in blocks, never inside expressions
        if isinstance(statement, cst.FunctionDef):
            name = statement.name.value
            defined[name] = defined.get(name, 0) + 1
            if any(cuda_precondition(ctx, s, mentions) for s in _block(statement.body)):
                requiring.add(name)
    return {name for name in requiring if defined[name] == 1}


def _block(node) -> list[cst.CSTNode]:
    if isinstance(node, (cst.Else, cst.Finally, cst.ExceptHandler)):
        node = node.body
    return list(node.body) if isinstance(node, cst.IndentedBlock) else []


def _callee_name(call: cst.Call) -> str | None:
    func = call.func
    return func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)


def _library_around(mentions: CudaMentions, stack) -> str | None:
    """The CUDA-only library a function around the end of `stack` requires, the innermost first: a nested
    function or class is only defined where the function that defines it runs (ultralytics' TensorRT
    calibrator, a class inside the export function that imports `tensorrt`)."""
    for node in reversed(stack):
        if isinstance(node, cst.FunctionDef) and (library := mentions.required_library(node)) is not None:
            return library
    return None


def _required_library(mentions: CudaMentions, function: cst.FunctionDef) -> str | None:
    """The CUDA-only library `function` imports in its body (also in an `if` whose other branch exits, or in
    a `try` whose handlers import it again or exit: `try: import tensorrt as trt` / `except ImportError:
    check_tensorrt(); import tensorrt as trt`) or calls from a statement of its body, if any."""
    body = function.body.body if isinstance(function.body, cst.IndentedBlock) else ()
    for statement in body:
        if isinstance(statement, cst.If) and isinstance(statement.orelse, cst.Else):
            branches = (statement.body, statement.orelse.body)
            for imports, other in (branches, branches[::-1]):
                if exits(other) and (library := imported_library(imports.body)):
                    return library
        if (
            isinstance(statement, cst.Try)
            and statement.handlers
            and (library := imported_library(statement.body.body)) is not None
            and all(
                exits(handler.body) or imported_library(handler.body.body) == library
                for handler in statement.handlers
            )
        ):
            return library
    return _block_library(mentions, body)


def _other_device_call(function: cst.FunctionDef, chain: cst.If | None) -> str | None:
    found: list[str] = []

    class Finder(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if found or node is chain:
                return False
            if isinstance(node, cst.Call) and _OTHER_DEVICE_FUNCTION.fullmatch(dotted(node.func) or ""):
                found.append(dotted(node.func))
            return True

    walk(function, Finder())
    return found[0] if found else None


def _cuda_named_arguments(call: cst.Call, cue: re.Pattern) -> list[str]:
    """The names among `call`'s arguments that mention CUDA: a variable (`cuda_rng_state`), or the key a
    subscript reads (`state["cuda_rng_state"]`: the state a CUDA check elsewhere stores)."""
    found = []
    for arg in call.args:
        value = arg.value
        if isinstance(value, cst.Subscript) and len(value.slice) == 1:
            name = _identifier(value.slice[0].slice)
        else:
            name = value.value if isinstance(value, cst.Name) else None
        if name is not None and cue.search(name):
            found.append(name)
    return found


def _outermost_if(stack, start: int) -> cst.If | None:
    """The outermost `if` statement below `stack[start]` (a function) that holds the end of `stack`."""
    return next((n for n in stack[start + 1 :] if isinstance(n, cst.If)), None)


#: torch's own entry points to CUDA-only code: the FlashAttention implementations torch registers (FA3, FA4)
#: are CUDA kernels (`torch/nn/attention/_fa3.py` registers them for the "CUDA" key), so a function that
#: activates one runs on NVIDIA GPUs (torchao's FP8 SDPA tests, review 40 #136-#148)
_CUDA_ONLY_TORCH_CALLS = frozenset({"torch.nn.attention.activate_flash_attention_impl"})


def _block_library(mentions: CudaMentions, statements, torch_only: bool = False) -> str | None:
    """The CUDA-only library one of `statements` imports or calls, if any (a call's name as the walk resolved
    it, else through the module's imports: the walk records calls with arguments only), or torch's own entry
    point to CUDA-only code that one calls (`_CUDA_ONLY_TORCH_CALLS`), also in the blocks that run whenever
    the statements do (a `with` or `try` body, a loop's; not an `if`'s). `torch_only`: only those calls."""
    ctx = mentions.ctx
    for statement in statements:
        if isinstance(statement, (cst.With, cst.Try, cst.For, cst.While)):
            inner = statement.body.body if isinstance(statement.body, cst.IndentedBlock) else ()
            if (found := _block_library(mentions, inner, torch_only=True)) is not None:
                return found
            continue
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        if not torch_only and (library := imported_library([statement])):
            return library
        for call in _calls_in(statement):
            name = mentions.call_names().get(id(call)) or _imported_call_name(ctx, call)
            if name in _CUDA_ONLY_TORCH_CALLS:
                return name
            if name and not torch_only and (library := library_of(name)):
                return library
    return None


def _imported_call_name(ctx, call: cst.Call) -> str | None:
    """The qualified name of a call the walk did not record, when a module-level import binds its head (after
    the walk only the module's scope is left: a function's own names would resolve to themselves)."""
    name, text = ctx.call_name(call), dotted(call.func)
    if name is None or text is None:
        return None
    head = text.split(".")[0]
    return name if name != text or ctx.module_binds(head) else None


def _calls_in(node: cst.CSTNode) -> list[cst.Call]:
    found: list[cst.Call] = []

    class Collect(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            found.append(call)

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False  # called later, if at all

    walk(node, Collect())
    return found
