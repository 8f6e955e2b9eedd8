"""Fixes that are tied to CUDA code that stays (used by `settle`, step 3): rewritten alone, they would leave
code half CUDA's.

- one argument of a call whose other arguments stay CUDA's (a CUDA device string, a finding left):
  `trace(..., [ProfilerActivity.CUDA], devices=["cuda"])`;
- a use of a CUDA call in a function that keeps another use of the same call for a person (for the
  profiler's activities, in a class);
- a finding in the test of an `if`/`while` whose body keeps a CUDA-only finding: `if torch.device("cuda") in
  devices:` around the NCCL backend's code;
- a call that takes a name whose value comes from CUDA-only code that stays: `torch.cuda.set_rng_state(state)`
  after `state = torch.cuda.get_rng_state()` kept CUDA's;
- a statement that calls a function of the module that keeps CUDA-only code:
  `_get_backend_stream().wait_stream(torch.cuda.current_stream())` where `_get_backend_stream()` makes a
  `torch.cuda.Stream`;
- code a fix rewrites (or guards) that holds a CUDA-only finding left: the new event's guarded
  `start.record(torch.cuda.current_stream())`;
- a value assigned to a name that CUDA-only code without a fix, a CUDA setting, or a statement naming NCCL or
  NVIDIA reads after it: `n = torch.cuda.device_count()` then `CUDA_VISIBLE_DEVICES`, `backend =
  pg._get_backend(torch.device("cuda"))` then `isinstance(backend, ProcessGroupNCCL)`;
- a device count, current device or availability whose answer CUDA-only code of the module that stays works
  with: `_gpu_count()` beside `torch.cuda.get_device_properties(i)` for each `i` below it;
- a placement in a function that takes a list of vendors' device types for an accelerator (`device.type in
  ["cuda", "xpu"]`), left for a person;
- code for the current accelerator in a method that reads an attribute of its instance, which another method
  of the class sets from CUDA code that stays (`self.device = torch.device("cuda")` under a CUDA check kept).
"""

from __future__ import annotations

import re
from itertools import pairwise

import libcst as cst

from neuron_migrate.migrate.call_sites import calls_in, top_level_names
from neuron_migrate.migrate.chains import OTHER_ACCELERATOR_TYPES
from neuron_migrate.migrate.context import shortened, tests_cuda_availability
from neuron_migrate.migrate.cuda_context import CudaMentions, only_on_cuda
from neuron_migrate.migrate.device_literals import is_cuda_string, string_value
from neuron_migrate.migrate.guards import exits
from neuron_migrate.migrate.names import dotted
from neuron_migrate.migrate.naming import scope_of
from neuron_migrate.migrate.walk import find


def inside(pending, region: tuple[cst.CSTNode, ...]) -> bool:
    """Whether the finding is one of the nodes of `region` or under one."""
    return any(node in pending.stack or node is pending.node for node in region)


def first_line(ctx, node: cst.CSTNode) -> str:
    """The first line of a node's source, shortened for a message."""
    text = ctx.code(node).strip().splitlines()
    line = text[0] if text else ""
    return shortened(line, 60)


def helper_of_cuda_function(ctx, pending, leftovers: list) -> tuple[str, str] | None:
    """(a user, its CUDA precondition), as text, when the finding is in a private function or class of the
    module (`_name`, at its top level) whose every use in the module is in a function that keeps a CUDA
    precondition for a person (`if not torch.cuda.is_available(): raise ...` at the top of its body, kept
    CUDA's): the helper only runs where that function does, and rewritten alone it would be half a migration
    (spikingjelly's `_PredictionWriter` and `_save_checkpoint`, which only its CUDA-and-NCCL inference and
    training loops use, review 39). A name used at the module's top level (`__all__`, a registry) may be
    used from anywhere: it is not such a helper."""
    top = pending.stack[1] if len(pending.stack) > 1 else None
    if not isinstance(top, (cst.FunctionDef, cst.ClassDef)):
        return None
    name = top.name.value
    if not name.startswith("_") or name.startswith("__"):
        return None
    users = ctx.once(_top_level_users, lambda: _top_level_users(ctx)).get(name)
    if not users or None in users:
        return None
    found = None
    for user in users:
        precondition = _kept_precondition(ctx, user, leftovers) if isinstance(user, cst.FunctionDef) else None
        if precondition is None:
            return None
        found = found or (user.name.value, precondition)
    return found


def _top_level_users(ctx) -> dict[str, list[cst.CSTNode | None]]:
    """For each name: the top-level functions and classes of the module that refer to it, other than the one
    that defines it, and None for each other top-level statement that does."""
    users: dict[str, list[cst.CSTNode | None]] = {}
    for statement, names in top_level_names(ctx):
        definition = statement if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) else None
        own = definition.name.value if definition is not None else None
        for referred in names - {own}:
            users.setdefault(referred, []).append(definition)
    return users


def _kept_precondition(ctx, function: cst.FunctionDef, leftovers: list) -> str | None:
    """The test of an `if` at the top of `function`'s body that exits, without an `else`, and holds a
    finding left for a person (a CUDA check kept CUDA's), as text, if any."""
    body = function.body.body if isinstance(function.body, cst.IndentedBlock) else ()
    for inner in leftovers:
        if inner.fix is not None or inner.no_change or function not in inner.stack:
            continue
        owner = next((n for n in inner.stack if isinstance(n, cst.If) and n.test in inner.stack), None)
        if owner is not None and owner in body and owner.orelse is None and exits(owner.body):
            return first_line(ctx, owner.test)
    return None


def same_test_left(ctx, pending, leftovers: list) -> tuple[str, str] | None:
    """(the function, the test), as text, for a device test used as a value (in a dict, a return, an
    assignment; not a test that guards code) when a finding of the same rule in its class (its module,
    outside a class) tests the same thing against the same device (`self.device_type` and `"cuda"`, with
    any operator) and stays. spikingjelly's precision policy reports `"grad_scaler": self.device_type ==
    "cuda" and ...` in `describe()`, while `create_grad_scaler()` keeps `if self.device_type != "cuda" ...:
    return None`: widened alone, the report would say neuron gets a scaler it never gets."""
    if (
        not pending.rule.device_test
        or _a_test(pending.stack)
        or (tested := _tested(ctx, pending.node)) is None
    ):
        return None
    owner = next((node for node in reversed(pending.stack) if isinstance(node, cst.ClassDef)), None)
    for inner in leftovers:
        if (
            inner is not pending
            and inner.rule is pending.rule
            and not inner.no_change
            and (owner is None or owner in inner.stack)
            and _tested(ctx, inner.node) == tested
        ):
            function = _unit_of(inner.stack)
            return (function.name.value if function else "the module"), first_line(ctx, inner.node)
    return None


def _a_test(stack: tuple[cst.CSTNode, ...]) -> bool:
    """Whether the node at the end of `stack` is (a part of `and`, `or`, `not` in) the test of an `if`,
    `while`, conditional expression or `assert`."""
    child = stack[-1]
    for parent in reversed(stack[:-1]):
        if isinstance(parent, (cst.If, cst.While, cst.IfExp, cst.Assert)):
            return parent.test is child
        if not isinstance(parent, (cst.BooleanOperation, cst.UnaryOperation)):
            return False
        child = parent
    return False


def _tested(ctx, node: cst.CSTNode) -> tuple[str, str] | None:
    """(what, against which string) a one-operator equality test compares: `x.type == "cuda"` and `x.type
    != "cuda"` both give (`x.type`, `cuda`)."""
    if not (isinstance(node, cst.Comparison) and len(node.comparisons) == 1):
        return None
    target = node.comparisons[0]
    value = string_value(target.comparator)
    if value is None or not isinstance(target.operator, (cst.Equal, cst.NotEqual)):
        return None
    return ctx.code(node.left), value


def same_call_left(ctx, pending, leftovers: list) -> str | None:
    """Another use of the same CUDA call, or of another call of the same timing machinery (streams, events,
    `synchronize`), in the finding's function that stays for a person (a to-do, not code that only runs on
    CUDA), as a clause (`its function keeps ... for a person`): torch's symmetric memory rewrote two of a
    function's four `torch.cuda.current_stream()` calls and kept the two whose stream is passed on; its
    runtime estimator would have synchronized the accelerator around CUDA events that stay; its
    `get_cycles_per_ms` times `torch.cuda._sleep` with events.
    Module-level code is left out: a script's top level is too large a unit to hold back.

    A class's profiler activities are one unit with the test of them its other methods keep (nequip's
    callback appends `ProfilerActivity.CUDA` in one method and sorts its summary by CUDA time in another when
    the list has it). Timing machinery that works on the same attribute of an instance is one unit across the
    class's methods:
    LAVIS's `PrefetchLoader` makes `self.stream` in `__init__` and waits for it in `next`, while `preload`
    keeps `with torch.cuda.stream(self.stream):` around a CUDA-only copy."""
    scope = scope_of(pending.stack)
    if not isinstance(scope, cst.FunctionDef) or (api := _kind(_called(ctx, pending.node))) is None:
        return None
    shared = _stream_attributes(ctx, pending) if api == _TIMING else set()
    for inner in leftovers:
        if (
            inner is not pending
            and not inner.no_change
            and _kind(_called(ctx, inner.node)) == api
            and (inner.rule is pending.rule or api == _TIMING)
        ):
            if scope_of(inner.stack) is scope:
                return f"its function keeps `{first_line(ctx, inner.node)}` for a person"
            if pending.rule.code in _CLASS_UNITS and _same_class(ctx, pending, inner):
                kept, method = first_line(ctx, inner.node), _unit_of(inner.stack).name.value
                return f"its class keeps `{kept}` in `{method}` for a person"
            if (attributes := shared & _stream_attributes(ctx, inner)) and _same_class(ctx, pending, inner):
                kept, method = first_line(ctx, inner.node), _unit_of(inner.stack).name.value
                on = f"`self.{min(attributes)}`"
                return f"its class keeps `{kept}` in `{method}` for a person, on the same {on}"
    if api == _TIMING and (helper := _timing_helper_in(ctx, scope)) is not None:
        return f"its function keeps `{helper}` for a person"
    return None


#: the rules whose findings in one class are one unit: the profiler activities a class records and the test
#: of them that picks what its summary sorts by (nequip's profiler callback)
_CLASS_UNITS = frozenset({"NM409"})


def _stream_attributes(ctx, pending) -> set[str]:
    """The instance attributes (`self.stream`) the finding's statement (or, in a compound statement's header,
    its node) names."""
    statement = next((n for n in reversed(pending.stack) if isinstance(n, cst.SimpleStatementLine)), None)
    return _self_attributes(statement if statement is not None else pending.node)


def _self_attributes(node: cst.CSTNode) -> set[str]:
    """The attributes of `self` that `node` names (`self.stream` gives `stream`), in its code only."""
    return {
        attribute.attr.value
        for attribute in find(node, cst.Attribute)
        if isinstance(attribute.value, cst.Name) and attribute.value.value == "self"
    }


def _same_class(ctx, pending, inner) -> bool:
    """Whether two findings sit in methods of the same class."""
    units = calls_in(ctx).units
    owner = _class_of(units, pending.stack)
    return owner is not None and _class_of(units, inner.stack) == owner


def _class_of(units: dict, stack) -> int | None:
    """The class (`call_sites` owner id) whose method holds the node at the end of `stack`, if any."""
    function = _unit_of(stack)
    unit = units.get(id(function)) if function is not None else None
    return unit.owner if unit is not None else None


def conjunct_left(pending, mentions: CudaMentions) -> str | None:
    """What says CUDA, and stays, in another operand of an `and` around the finding, as text: ignite's
    `torch.cuda.device_count() > 1 and "cuda" in idist.device().type` only ever holds on CUDA, so counting
    other accelerators there changes nothing."""
    for parent, child in pairwise(pending.stack):
        if isinstance(parent, cst.BooleanOperation) and isinstance(parent.operator, cst.And):
            other = parent.right if child is parent.left else parent.left
            if (mention := mentions.find(other) or _cuda_type_test(mentions, other)) is not None:
                return mention
    return None


def _cuda_type_test(mentions: CudaMentions, node: cst.CSTNode) -> str | None:
    """A comparison with the string `"cuda"` in `node` that no fix of this run rewrites, as text."""
    for comparison in find(node, cst.Comparison):
        sides = (comparison.left, *(target.comparator for target in comparison.comparisons))
        if id(comparison) not in mentions.covered and any(is_cuda_string(side) for side in sides):
            return mentions.ctx.excerpt(comparison)
    return None


#: the two halves of mixed precision: autocast (NM201, NM204) and the loss scaler (NM202, NM205)
_AMP_HALVES = {"NM201": "autocast", "NM204": "autocast", "NM202": "scaler", "NM205": "scaler"}


def amp_partner_left(ctx, pending, leftovers: list) -> str | None:
    """The other half of mixed precision that stays CUDA's in the finding's module (a scaler's autocast,
    an autocast's scaler), as text: MONAI's trainers got `torch.amp.GradScaler(device_type)` while their
    `torch.autocast("cuda", **engine.amp_kwargs)` stayed, so neuron scaled float32 losses and ran no
    autocast at all (review 14)."""
    half = _AMP_HALVES.get(pending.rule.code)
    if half is None:
        return None
    for inner in leftovers:
        other = _AMP_HALVES.get(inner.rule.code)
        if other is not None and other != half and not inner.no_change:
            return first_line(ctx, inner.node)
    return None


def function_todo(ctx, pending, leftovers: list, mentions: CudaMentions) -> str | None:
    """A CUDA-only to-do in the finding's function that no fix covers, safe or unsafe, as text: the function
    cannot run on another device until a person changes it, so a generic rewrite of the rest would be half a
    migration a maintainer refuses (torch's distributed tests set the accelerator's device for inputs that
    stay `torch.randn(1, 1000).cuda()`; the bundled example moves streams to the accelerator beside NVTX
    ranges, which raise off CUDA). The person migrates the function as a whole, and `fix` rewrites the rest
    once that to-do is gone. What does not stop the function from running elsewhere does not count:
    settings (environment variables), information, a test of the device or a CUDA check (they answer
    anywhere; but a CUDA-or-CPU choice of the function's device holds its generic fixes: `_pins_device`), code
    reached only on CUDA (behind a CUDA check, or after one in an `and`:
    `torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9`); nor does module-level
    code, too large a unit to hold back. The function is the outermost one, with the closures it defines:
    torchtune's activation offloader keeps `self.s0 = torch.cuda.default_stream()` in `__init__`, where the
    hooks that move tensors back with `.to("cuda")` are defined."""
    scope = _unit_of(pending.stack)
    if scope is None:
        return None
    for inner in leftovers:
        if (
            inner is not pending
            and inner.fix is None
            and not inner.no_change
            and not inner.rule.cuda_setting
            and inner.rule.holds_function
            and inner.rule.severity != "info"
            and ((not inner.rule.device_test and not inner.region) or _pins_device(inner))
            and _unit_of(inner.stack) is scope
            and not _after_cuda_test(ctx, inner.stack)
            and only_on_cuda(inner, mentions, leftovers, ctx.path) is None
        ):
            return first_line(ctx, inner.node)
    return None


def _pins_device(inner) -> bool:
    """Whether `inner` is a CUDA-or-CPU choice that stays and names the function's device (`device = "cuda"
    if ... else "cpu"`): a generic rewrite beside it serves an accelerator the function never picks (e3nn's
    profile script, review 41 #3: the profiler's activities made generic while its device stays CUDA or the
    CPU)."""
    node = inner.node
    parent = inner.stack[-2] if len(inner.stack) > 1 else None
    return (
        isinstance(node, cst.IfExp)
        and isinstance(parent, (cst.Assign, cst.AnnAssign))
        and parent.value is node
    )


def _after_cuda_test(ctx, stack: tuple[cst.CSTNode, ...]) -> bool:
    """Whether the code at the end of `stack` is the right side of an `and` whose left side tests for CUDA
    (`torch.cuda.is_available() and ...`): it is evaluated only where CUDA is."""
    return any(
        isinstance(parent, cst.BooleanOperation)
        and isinstance(parent.operator, cst.And)
        and child is parent.right
        and tests_cuda_availability(ctx.code(parent.left))
        for parent, child in pairwise(stack)
    )


def _timing_helper_in(ctx, function: cst.FunctionDef) -> str | None:
    """A call of a CUDA-only timing helper that no rule rewrites in `function`, as text: torch's
    `get_cycles_per_ms` times `torch.cuda._sleep(cycles)` with events."""
    for helper in _TIMING_HELPERS:
        for site in calls_in(ctx).sites.get(helper.rsplit(".", 1)[-1], ()):
            if function in site.stack and dotted(site.stack[-1].func) == helper:
                return f"{helper}(...)"
    return None


_TIMING = "CUDA timing"
#: CUDA-only helpers that time work on the device and have no generic counterpart
_TIMING_HELPERS = ("torch.cuda._sleep",)
#: the CUDA calls that time or order work on the device: one function keeps them all CUDA's, or none
_TIMING_CALLS = re.compile(
    r"torch\.cuda\.(?:synchronize|Event|Stream|current_stream|default_stream|stream|set_stream|"
    r"ExternalStream)"
)


def _kind(api: str | None) -> str | None:
    """What a call is, for `same_call_left`: the timing machinery as one, any other call as itself."""
    return _TIMING if api is not None and _TIMING_CALLS.fullmatch(api) else api


def _called(ctx, node: cst.CSTNode) -> str | None:
    """What a finding's node calls or names: a torch API by its qualified name (`torch.cuda.current_stream`,
    however imported), `.cuda` for a method of some value (`x.cuda()`, `model.cuda(rank)`)."""
    target = node.func if isinstance(node, cst.Call) else node
    qualified = ctx.qualified_name(target)
    if qualified is not None and qualified.startswith("torch."):
        return qualified
    if isinstance(target, cst.Attribute):
        return f".{target.attr.value}"
    return dotted(target)


def cuda_sibling(ctx, pending, leftovers: list, mentions: CudaMentions) -> str | None:
    """Another argument of the call the finding is an argument of that stays CUDA's: a CUDA device string
    (`devices=["cuda"]`) or a finding this run leaves (torch's `dump_chrome_trace(...,
    [ProfilerActivity.CUDA], devices=["cuda"])`: rewriting one argument makes the call half CUDA's)."""
    stack = pending.stack
    for index in range(len(stack) - 1, 0, -1):
        own, call = stack[index], stack[index - 1]
        if isinstance(own, cst.Arg) and isinstance(call, cst.Call) and own in call.args:
            break
    else:
        if not isinstance(pending.node, cst.Call):
            return None
        own, call = None, pending.node  # a finding reported at the call (NM301's `new_group(backend=...)`)
    for arg in call.args:
        if arg is own or id(arg) in mentions.covered:
            continue
        if own is not None and (_cuda_devices(arg.value) or any(inside(p, (arg,)) for p in leftovers)):
            return shortened(ctx.code(arg), 40)
        if isinstance(arg.value, cst.Name) and _bound_to_cuda_code(ctx, arg.value, pending, mentions):
            return shortened(ctx.code(arg), 40)
    return None


def _bound_to_cuda_code(ctx, name: cst.Name, pending, mentions: CudaMentions) -> bool:
    """Whether the function binds `name` to code that names a CUDA-only API (torchtitan's `pg_options =
    dist.ProcessGroupNCCL.Options(...)` passed with `backend="nccl"`: the options are NCCL's)."""
    scope = scope_of(pending.stack)
    return any(
        b.value is not None and mentions.find(b.value, strong=True, names_only=True) is not None
        for b in ctx.bindings.in_scope(name.value, scope)
    )


def guarded_leftover(ctx, pending, leftovers: list) -> str | None:
    """For a finding without a region of its own in the test of an `if`/`while` (`if torch.device("cuda") in
    devices:`), the first CUDA-only finding left in the code the test guards, as text: rewritten, the test
    would send other devices into it (torch's c10d, where that code fetches the NCCL backend)."""
    if pending.region:
        return None
    for inner, outer in pairwise(reversed(pending.stack)):
        if isinstance(outer, (cst.If, cst.While)) and inner is outer.test:
            guarded = (outer.body,)
            break
        if isinstance(outer, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return None
    else:
        return None
    for inner in leftovers:
        if inner is not pending and inside(inner, guarded):
            return f"`{first_line(ctx, inner.node)}`"
    return None


def rewritten_leftover(ctx, pending, leftovers: list) -> str | None:
    """The first CUDA-only finding left inside the code the finding's fix replaces, as text: the text the
    fix writes keeps it verbatim. torch's runtime estimator made `torch.cuda.Event` a `torch.Event` and
    guarded its `start_event.record(torch.cuda.current_stream())` with an accelerator check: on another
    accelerator the guard now lets it reach the CUDA stream that stays."""
    replaced = tuple(replacement.node for replacement in pending.fix.replacements)
    for inner in leftovers:
        if inner is not pending and inside(inner, replaced):
            return f"`{first_line(ctx, inner.node)}`"
    return None


def cuda_source(ctx, pending, leftovers: list) -> str | None:
    """The CUDA-only code that stays and gives the value of a name the finding's call takes, or the name its
    device test compares, as text, if any: `cuda_rng_state = torch.cuda.get_rng_state()` kept CUDA's, then
    `torch.cuda.set_rng_state(cuda_rng_state)` (torch's Dynamo): restoring generically what was saved from
    CUDA is half a migration (also a name inside an argument: axolotl's `torch.device(f"cuda:{actor_gpu}")`
    after `actor_gpu = original_device.index if original_device.type == "cuda" ... else 0` stays, review 40
    #15); `device = "cuda" if (torch.cuda.is_available() and args.cuda) else "cpu"` left
    for a person, then `args.cuda = device == "cuda"` (e3nn's benchmark, review 41 #1): `device` is never
    neuron until that choice changes."""
    call = pending.node if isinstance(pending.node, cst.Call) else None
    call = call or next((n for n in reversed(pending.stack) if isinstance(n, cst.Call)), None)
    names = {name for arg in call.args for name in _names_read(arg.value)} if call else set()
    test = pending.node
    if pending.rule.device_test and isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name):
        names.add(test.left.value)
    if not names:
        return None
    scope = scope_of(pending.stack)
    for inner in leftovers:
        assign = next((n for n in reversed(inner.stack) if isinstance(n, cst.Assign)), None)
        if (
            assign is not None
            and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)
            and assign.targets[0].target.value in names
            and (assign.value in inner.stack or assign.value is inner.node)
            and scope_of(inner.stack) is scope
        ):
            return first_line(ctx, assign)
    return None


def choice_test_left(ctx, pending, leftovers: list) -> str | None:
    """The CUDA test that stays, for now or for good, of the conditional whose branch the finding rewrites,
    as text: ART's `"cuda:0" if torch.cuda.is_available() else "cpu"` while its availability check waits
    for the module's apex code (review 42 #17): a generic branch behind a CUDA test is never taken off
    CUDA."""
    node = pending.node
    if not isinstance(node, cst.IfExp):
        return None
    for inner in leftovers:
        if inner is not pending and (inner.node is node.test or node.test in inner.stack):
            return first_line(ctx, inner.node)
    return None


def _names_read(node: cst.CSTNode) -> set[str]:
    """The variables an expression reads: its names, not the attributes it takes of them (`actor_gpu` in
    `f"cuda:{actor_gpu}"`, `x` in `x.index`)."""
    attributes = {id(attribute.attr) for attribute in find(node, cst.Attribute)}
    return {name.value for name in find(node, cst.Name) if id(name) not in attributes}


def cuda_maker(ctx, pending, leftovers: list) -> tuple[str, str] | None:
    """(`f()`, the CUDA-only code it keeps), as text, when the finding's statement calls a function `f` of
    the module that returns what CUDA-only code left for a person makes: torch's symmetric memory made
    `_get_backend_stream().wait_stream(torch.cuda.current_stream())` wait on the accelerator's stream while
    `_get_backend_stream()` still makes a `torch.cuda.Stream` (one stream API per statement: change the
    maker and its users together). What `f` returns is the CUDA code's value: the code is in a `return`, or
    assigned to what a `return` gives (`cache[key] = torch.cuda.Stream()` ... `return cache[key]`)."""
    statement = next((n for n in reversed(pending.stack) if isinstance(n, cst.SimpleStatementLine)), None)
    if statement is None:
        return None
    functions = {id(s) for s in ctx.module.body if isinstance(s, cst.FunctionDef)}
    for inner in leftovers:
        function = next((n for n in inner.stack if id(n) in functions), None)
        if function is None or function in pending.stack:
            continue
        sites = calls_in(ctx).sites.get(function.name.value, ())
        if not any(site.by_name and statement in site.stack for site in sites):
            continue
        returns = find(function, cst.Return, skip=cst.FunctionDef)  # not a nested function's
        returned = {ctx.code(r.value).strip() for r in returns if r.value is not None}
        if _gives(ctx, inner.stack, returned):
            return f"{function.name.value}()", first_line(ctx, inner.node)
    return None


def _gives(ctx, stack, returned: set[str]) -> bool:
    """Whether the code at the end of `stack` is returned: inside a `return`, or assigned to an expression
    that a `return` of `returned` gives."""
    for node in reversed(stack):
        if isinstance(node, cst.Return):
            return True
        if isinstance(node, cst.Assign):
            return any(ctx.code(target.target).strip() in returned for target in node.targets)
        if isinstance(node, (cst.SimpleStatementLine, cst.FunctionDef)):
            return False
    return False


def cuda_sink(pending, sinks: list, mentions: CudaMentions, positions, lines: list[str]) -> str | None:
    """The line after the assignment of the finding's value to a name that reads the name and stays CUDA's,
    if any: a CUDA-only finding or CUDA setting without a fix (`sinks`: `n = torch.cuda.device_count()` then
    `os.environ["CUDA_VISIBLE_DEVICES"] = ... n ...`, torch's AOT minifier: the count would be the
    accelerator's while it still picks CUDA devices), or a statement with a name that says NCCL or NVIDIA
    in code no fix of this run replaces (`backend = pg._get_backend(torch.device("cuda"))` then
    `if isinstance(backend, ProcessGroupNCCL):`, torch's c10d: the value is only ever NCCL's). By the
    sink's line (a finding may be reported where the setting is used, `run(env=env)`, so its stack is not
    where it is written)."""
    stack = pending.stack
    assign = next((n for n in reversed(stack) if isinstance(n, cst.Assign)), None)
    if assign is None or len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return None
    if assign.value not in stack and assign.value is not pending.node:
        return None  # the finding is in the target, not the value
    # the name as a value: not an attribute (`x.name`), a longer name, or a keyword (`f(name=...)`)
    reads = re.compile(rf"(?<![\w.]){re.escape(assign.targets[0].target.value)}(?!\w)(?!\s*=(?!=))")
    scope, assigned_at = scope_of(stack), positions[pending.node].end.line
    for sink in sinks:
        at = positions[sink.node].start.line
        if at > assigned_at and scope in sink.stack and reads.search(lines[at - 1]):  # after: the new value
            return shortened(lines[at - 1].strip(), 50)
    for header in _headers_after(scope, assign):
        if mentions.find(header, strong=True, names_only=True) and reads.search(
            code := mentions.ctx.code(header)
        ):
            return shortened(code.strip().splitlines()[0], 50)
    return None


def _headers_after(scope: cst.CSTNode, assign: cst.Assign) -> list[cst.CSTNode]:
    """In source order, the simple statements and compound headers (an `if`'s test, a loop's iterable) of
    `scope` that come after the statement holding `assign`; nested functions and classes are other scopes."""
    found: list[cst.CSTNode] = []
    passed = False

    def visit(statements) -> None:
        nonlocal passed
        for statement in statements:
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                continue
            if isinstance(statement, cst.SimpleStatementLine):
                if passed:
                    found.append(statement)
                passed = passed or assign in statement.body
                continue
            header = getattr(statement, "test", None) or getattr(statement, "iter", None)
            if passed and header is not None:
                found.append(header)
            for block in _blocks_of(statement):
                visit(block)

    visit(scope.body.body if isinstance(scope, cst.FunctionDef) else scope.body)
    return found


def _blocks_of(statement: cst.CSTNode) -> list:
    """The statement lists of a compound statement's bodies, `else`/`elif`, handlers and `finally`."""
    blocks = []
    for part in (statement, *getattr(statement, "handlers", ())):
        body = getattr(part, "body", None)
        if isinstance(body, cst.IndentedBlock):
            blocks.append(body.body)
    orelse = getattr(statement, "orelse", None)
    if isinstance(orelse, cst.If):
        blocks.append([orelse])
    elif isinstance(orelse, cst.Else) and isinstance(orelse.body, cst.IndentedBlock):
        blocks.append(orelse.body.body)
    final = getattr(statement, "finalbody", None)
    if final is not None and isinstance(final.body, cst.IndentedBlock):
        blocks.append(final.body.body)
    return blocks


def _cuda_devices(value: cst.BaseExpression) -> bool:
    """A CUDA device string, or a list or tuple of them: `"cuda"`, `f"cuda:{rank}"`, `["cuda"]`."""
    if isinstance(value, (cst.List, cst.Tuple)):
        return bool(value.elements) and all(is_cuda_string(e.value) for e in value.elements)
    return is_cuda_string(value)


def device_fact_user(ctx, pending, leftovers: list) -> tuple[str, str] | None:
    """(the function, the CUDA-only code it keeps), as text, when the finding asks CUDA how many devices there
    are, which one is current, or whether there is one, and CUDA-only code of the module that stays works
    with the answer: rewritten alone, the answer would be the accelerator's while that code still means
    CUDA's devices. That code is
    - in the finding's own function (torch's RPC registry counts the devices beside `if
      torch.cuda.is_available() and devices: torch.cuda.init()`, kept CUDA's);
    - where the answer goes, when the finding's function returns it: a function that uses it, or one used
      beside it by a third (torch's NUMA binding counts the devices with `_gpu_count()` and asks
      `torch.cuda.get_device_properties(i)` for each; `_local_tensor`'s `_device` property is read by `if
      self._device.type == "cuda": ... else:`, whose `else` is the CPU's path);
    - in a function the `if` the finding tests calls (torch's benchmark utilities run
      `_enable_tensor_cores()`, which asks for the CUDA capability, under `if torch.cuda.is_available():`);
    - the same question kept CUDA's in a function the finding's function uses or is used by (the registry's
      local count beside `_get_device_infos`, which its peers run);
    - a method of the same class that reads the attribute the answer is stored in (spikingjelly's profiler:
      `self.device_count = torch.cuda.device_count()` in `__init__`, then `for i in range(self.device_count):
      with torch.cuda.device(i): torch.cuda.memory_allocated()` in `export()`, held back for the torch the
      project supports).
    Functions of the module are matched by name, methods of the same class as `self.name`. A test of the
    device that only adds work for CUDA (an `if` without `else`) does not count: other devices skip it
    whatever the answer (torch's `ShardedTensor.to` picks the current index under `if device_to.type ==
    "cuda":`)."""
    api = _called(ctx, pending.node)
    if api not in _DEVICE_FACTS or (function := _unit_of(pending.stack)) is None:
        return None
    units = calls_in(ctx).units
    returned = any(isinstance(node, cst.Return) for node in pending.stack[pending.stack.index(function) :])
    test = _if_testing(pending)
    gated = ctx.code(test.body) if test is not None else None  # the code the answer lets run
    owner, stored = units[id(function)].owner, _own_attribute_set(pending.stack)
    for inner in leftovers:
        if (
            inner is pending
            or inner.no_change
            or inner.rule.severity == "info"
            or inner.rule.cuda_setting
            or (inner.rule.device_test and _only_adds_cuda_work(inner))
            or (other := _unit_of(inner.stack)) is None
        ):
            continue
        if (
            other is function
            or (returned and _gets_answer(units, function, other))
            or (gated is not None and _calls(gated, other, units[id(other)].owner))
            or (_called(ctx, inner.node) == api and _uses_either(units, function, other))
            or (stored is not None and owner is not None and _reads_own(units[id(other)], owner, stored))
        ):
            return other.name.value, first_line(ctx, inner.node)
    return None


def _own_attribute_set(stack: tuple[cst.CSTNode, ...]) -> str | None:
    """`name` when the node at the end of `stack` is in the value of `self.name = ...` (or `cls.name`)."""
    for node, child in pairwise(stack):
        if isinstance(node, cst.Assign) and child is node.value and len(node.targets) == 1:
            target = node.targets[0].target
            own = isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name)
            return target.attr.value if own and target.value.value in ("self", "cls") else None
    return None


def _reads_own(unit, owner: int, attribute: str) -> bool:
    """Whether an outermost function (`unit`) is a method of the class `owner` that refers to its own
    `attribute` (`self.attribute`)."""
    return unit.owner == owner and "." + attribute in unit.refers


#: the CUDA calls whose answer is a fact about CUDA's devices
_DEVICE_FACTS = frozenset({"torch.cuda.device_count", "torch.cuda.current_device", "torch.cuda.is_available"})


def class_state_left(ctx, pending, leftovers: list) -> tuple[str, str, str] | None:
    """(the attribute, the method that sets it, the CUDA code it keeps), as text, when the finding's fix
    serves the current accelerator in a method that reads an attribute of its instance (itself or through
    the class's methods it calls) that another method of the class sets from CUDA code that stays:
    - simpletransformers' models choose `self.device = torch.device("cuda")` in `__init__` under `if
      use_cuda: if torch.cuda.is_available():` (kept CUDA's: it raises "use_cuda set to True when cuda is
      unavailable"), so a generic autocast in `train()` would serve a model that never leaves CUDA or the CPU;
    - GLiNER's memory estimator sets `self.total_gpu_memory = total` after `free, total =
      torch.cuda.mem_get_info()` (kept for a person), which `available_memory()` reads under the check its
      fix would make generic;
    - fairscale's FSDP fills `self._streams["all_gather"] = torch.cuda.Stream()` in `_setup_streams` under a
      CUDA check that stays, so `_wait_for_previous_optim_step`'s `if not torch.cuda.is_available(): return`
      made generic would reach an empty dict on neuron.
    A fix that serves whatever it is given (`with torch.cuda.stream(self.s):` → `with self.s:`) waits only
    when it rewrites a use of the attribute itself (fairscale's offload streams, `torch.cuda.Stream`s that
    stay).

    An attribute set from a CUDA check that stays (recbole's `self.gpu_available = torch.cuda.is_available()
    and config["use_gpu"]`) does not count: a flag says where code runs, which the fix's own check decides.
    """
    units = calls_in(ctx).units
    function, owner = _unit_of(pending.stack), _class_of(units, pending.stack)
    if pending.fix is None or owner is None:
        return None
    for inner in leftovers:
        other = _unit_of(inner.stack)
        if other is function or _class_of(units, inner.stack) != owner:
            continue
        if inner.region or inner.rule.device_test or inner.fix is not None:
            continue  # a flag from a CUDA test (recbole's `self.gpu_available`) is no CUDA value, and one
            # with an unsafe fix (super-gradients' `self.net = DDP(net, device_ids=[rank])`) changes with it
        for attribute, statement in _state_set(ctx, inner):
            if (
                _reads(units, function, owner, "." + attribute)
                if pending.fix.generalizes
                else attribute in _self_attributes(pending.node)
            ):
                return attribute, other.name.value, first_line(ctx, statement)
    return None


def _reads(units: dict, function: cst.FunctionDef, owner: int, attribute: str) -> bool:
    """Whether a method refers to an attribute of its instance (`.device`), itself or through the methods of
    its class it calls (`train()` runs `self._move_model_to_device()`, which reads `self.device`)."""
    methods = {unit_id: unit for unit_id, unit in units.items() if unit.owner == owner}
    readers = {unit_id for unit_id, unit in methods.items() if attribute in unit.refers}
    while True:
        names = {"." + methods[r].name for r in readers}
        more = {u for u, unit in methods.items() if u not in readers and unit.refers & names}
        if not more:
            return id(function) in readers
        readers |= more


def _state_set(ctx, pending) -> list[tuple[str, cst.CSTNode]]:
    """The instance attributes the finding's statement sets to the CUDA value it is (`self.device =
    torch.device("cuda")`), and those that later statements of its block set from the names it binds
    (`free, total = torch.cuda.mem_get_info()`, then `self.total_gpu_memory = total`), each with its
    statement, read from the file's bindings index. A value the finding is only a part of does not count:
    `self.net = DDP(self.net, device_ids=[rank])` is still the model, which every method reads; nor does
    one that wraps the attribute's own value (`self.net = nn.DataParallel(self.net)`)."""
    stack = pending.stack
    at = next(
        (i for i in range(len(stack) - 1, 0, -1) if isinstance(stack[i], cst.SimpleStatementLine)), None
    )
    if at is None:
        return []
    statement, block = stack[at], stack[at - 1]
    value = getattr(statement.body[0], "value", None) if len(statement.body) == 1 else None
    if value is not pending.node and getattr(value, "func", None) is not pending.node:
        return []  # the CUDA code is only a part of the value (`self.net = DDP(net, device_ids=[rank])`)
    bindings = [b for b in ctx.bindings.in_block(block) if b.kind == "assign"]
    made = [b for b in bindings if b.statement is statement]
    found = [
        (attribute, statement)
        for b in made
        if (attribute := _own_attribute(b.key)) and not _rewraps(value, attribute)
    ]
    names = [b.key for b in made if b.key.isidentifier()]
    if names:
        bound = re.compile(rf"\b(?:{'|'.join(map(re.escape, names))})\b")
        after = max(b.order for b in made)
        found.extend(
            (attribute, b.statement)
            for b in bindings
            if b.order > after
            and (attribute := _own_attribute(b.key))
            and b.value is not None
            and bound.search(ctx.code(b.value))
        )
    return found


def _rewraps(value: cst.BaseExpression, attribute: str) -> bool:
    """Whether `value` wraps what the attribute held before (`self.net = nn.DataParallel(self.net)`,
    super-gradients' data-parallel mode): the attribute is still the model, which its class made elsewhere
    and every method reads."""
    return attribute in _self_attributes(value)


def _own_attribute(key: str) -> str | None:
    """`x` for the key `self.x` (an attribute of the instance itself) or `self.x["k"]` (an entry of it:
    fairscale's `self._streams["all_gather"]`), else None."""
    attribute = key.removeprefix("self.").split("[", 1)[0]
    return attribute if not key.startswith(attribute) and attribute.isidentifier() else None


def _if_testing(pending) -> cst.If | None:
    """The `if` whose test holds the finding, if any."""
    for child, parent in pairwise(reversed((*pending.stack, pending.node))):
        if isinstance(parent, cst.If) and child is parent.test:
            return parent
        if isinstance(parent, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return None
    return None


def _only_adds_cuda_work(pending) -> bool:
    """Whether the finding is in the test of an `if` without `else` or `elif`."""
    test = _if_testing(pending)
    return test is not None and test.orelse is None


def _unit_of(stack: tuple[cst.CSTNode, ...]) -> cst.FunctionDef | None:
    """The outermost function around the node at the end of `stack` (a module-level function or a method),
    if any."""
    return next((node for node in stack if isinstance(node, cst.FunctionDef)), None)


def _refers(unit, function: cst.FunctionDef, owner: int | None) -> bool:
    """Whether an outermost function (`unit`) refers to `function`, a module-level function when `owner` is
    None, else a method of the class `owner`."""
    if owner is None:
        return function.name.value in unit.refers
    return unit.owner == owner and "." + function.name.value in unit.refers


def _uses_either(units: dict, one: cst.FunctionDef, other: cst.FunctionDef) -> bool:
    """Whether one of two outermost functions refers to the other."""
    first, second = units[id(one)], units[id(other)]
    return _refers(first, other, second.owner) or _refers(second, one, first.owner)


def _gets_answer(units: dict, source: cst.FunctionDef, user: cst.FunctionDef) -> bool:
    """Whether what the outermost function `source` returns can reach `user`: `user` refers to `source`, or a
    third function refers to both (and may hand one's result to the other)."""
    giver, taker = units[id(source)], units[id(user)]
    return _refers(taker, source, giver.owner) or any(
        _refers(unit, source, giver.owner) and _refers(unit, user, taker.owner)
        for unit in units.values()
        if unit is not giver and unit is not taker
    )


def _calls(code: str, function: cst.FunctionDef, owner: int | None) -> bool:
    """Whether `code` calls `function`: by its name for a module-level function, as `self.name(` or
    `cls.name(` for a method."""
    name = re.escape(function.name.value)
    pattern = rf"(?<![\w.]){name}\s*\(" if owner is None else rf"\b(?:self|cls)\.{name}\s*\("
    return re.search(pattern, code) is not None


def vendor_list_left(ctx, pending, leftovers: list) -> str | None:
    """A test of a device type against a list that names CUDA and other vendors' accelerators (`device.type
    in ["cuda", "xpu"]`), left for a person in the finding's function, as text, when the finding places
    something on CUDA: that list is what the function takes for an accelerator, so a neuron device from the
    rewrite would be taken for something else. peft's DoRA moved `lora_B` to the current accelerator in the
    `else` of an XPU check, while `lora_A.device.type in ["cuda", "xpu"]` beside it still decided which
    tensors are on an accelerator. The list and the placements change together."""
    function = scope_of(pending.stack)
    if pending.rule.code not in _PLACEMENTS or not isinstance(function, cst.FunctionDef):
        return None
    for inner in leftovers:
        if (
            inner.rule.device_test
            and isinstance(inner.node, cst.Comparison)
            and any(
                isinstance(target.operator, (cst.In, cst.NotIn)) and _vendor_list(target.comparator)
                for target in inner.node.comparisons
            )
            and scope_of(inner.stack) is function
        ):
            return first_line(ctx, inner.node)
    return None


#: the rules whose findings place code or data on CUDA: `"cuda"`, `torch.device("cuda")`, `.cuda()`
_PLACEMENTS = frozenset({"NM101", "NM102", "NM103"})


def _vendor_list(value: cst.BaseExpression) -> bool:
    """A list, tuple or set of strings that holds `"cuda"` and another accelerator's device type."""
    if not isinstance(value, (cst.List, cst.Tuple, cst.Set)):
        return False
    names = {string_value(element.value) for element in value.elements}
    return "cuda" in names and bool(names & OTHER_ACCELERATOR_TYPES)
