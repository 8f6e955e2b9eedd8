"""After the walk, before positions become edits: which fixes stand, and how they name the device.

In order, for every finding with a fix:

1. a vendored copy of another project (a file under `_vendor/`, `vendor/`, `third_party/`), or an install-time
   copy of the package's own repository (OpenMMLab's `.mim/`), is not fixed: the change belongs where it comes
   from (a to-do); nor is a module that cannot be imported (it imports a module of its own package from a
   package the project does not have: `stale_imports.py`); nor is a project that imports DeepSpeed's
   accelerator abstraction (`from deepspeed.accelerator import get_accelerator`): its device code is written
   with it; code that only runs when `torch.accelerator` itself is missing (an old-torch fallback branch)
   keeps its CUDA calls: the fix is withdrawn (a note); so does a device that is only reached without an
   accelerator (`acc.type if acc is not None else "cuda"`), where the idiom would always name the CPU;
2. a fix that needs a newer torch than the project's `target-torch` is withdrawn, saying which version (held
   back, unless step 3 finds a reason that holds whatever torch is declared, such as code that only runs on
   CUDA, which then replaces it); so is a fix of code a test expects to raise (the body of `with
   self.assertRaises...:` / `pytest.raises`: a rewrite can change the error it checks; a note); a safe fix
   that needs a person's review becomes unsafe, saying why (`cautions.py`: a parameter's or a Ray launcher's
   default, a module that imports torch lazily, TorchScript, a test's skip condition, a CPU-and-CUDA-only
   library, code MPS cannot run, a module that keeps other accelerators apart);
3. a CUDA check whose guarded code keeps CUDA-only calls (a finding left without a fix that this run applies,
   or code that mentions CUDA by name: `cuda_context`) stays a CUDA check: its fix is withdrawn, and so are
   the fixes of the code under it, and of any other code that only runs on CUDA (it is right as it is there:
   those findings become notes). A check whose body is only code that needs no change (a note: a CUDA seed
   right after `torch.manual_seed`, cuDNN flags) is itself a note: it works everywhere as it is. A CUDA
   device-type test whose fixed form would send neuron into code that is neither device plumbing nor fixed in
   this run, that selects (or skips) a plain choice with no device work, or that sits in a file using
   CUDA-only libraries, keeps its fix as an unsafe one (`device_neutral`). A fix tied to CUDA code that stays
   is withdrawn (`cuda_ties`): one argument of a call whose other arguments stay CUDA's, a call its function
   also makes for a person, a call taking a value CUDA-only code gives, a test whose `if` body keeps a
   CUDA-only finding, code rewritten around a CUDA-only finding that stays, a value that CUDA-only code, a
   CUDA setting or NCCL-named code reads, code for the accelerator in a method that reads an attribute its
   class sets from CUDA code that stays, a device test used as a value whose same test stays CUDA's in its
   class, a private helper that only functions keeping their CUDA check use; so is a check that only warns
   without an accelerator while the same check stays CUDA's in its class or module (the warning describes that
   one's choice). Repeated until nothing changes, since withdrawing one fix can keep the check around it;
4. the device placeholders of the remaining fixes are resolved (`naming.py`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from itertools import pairwise
from typing import NamedTuple

import libcst as cst

from neuron_migrate.migrate.api_versions import needs_torch
from neuron_migrate.migrate.bindings import key_of
from neuron_migrate.migrate.cautions import caution
from neuron_migrate.migrate.cuda_context import (
    CudaMentions,
    covered_nodes,
    gpu_among_devices,
    names_cuda,
    nodes_under,
    only_on_cuda,
)
from neuron_migrate.migrate.cuda_ties import (
    amp_partner_left,
    choice_test_left,
    class_state_left,
    conjunct_left,
    cuda_maker,
    cuda_sibling,
    cuda_sink,
    cuda_source,
    device_fact_user,
    first_line,
    function_todo,
    guarded_leftover,
    helper_of_cuda_function,
    inside,
    rewritten_leftover,
    same_call_left,
    same_test_left,
    vendor_list_left,
)
from neuron_migrate.migrate.device_literals import cpu_or_cuda_declared
from neuron_migrate.migrate.device_neutral import flag_side, is_message, widening_risk
from neuron_migrate.migrate.fixes import FixStyle
from neuron_migrate.migrate.guards import (
    accelerator,
    admitted_devices,
    branch_torch_floor,
    implies,
    without_accelerator_api,
)
from neuron_migrate.migrate.naive_model_parallel import NAIVE_MODEL_PARALLEL, naive_model_parallel
from neuron_migrate.migrate.names import dotted
from neuron_migrate.migrate.naming import DeviceNames
from neuron_migrate.migrate.test_gates import parametrized_without_neuron
from neuron_migrate.migrate.torch_floor import HELD_BACK, dotted_release
from neuron_migrate.migrate.walk import find

_FALLBACK = "in a fallback for a torch without `torch.accelerator`: no change needed"
_VENDORED = "vendored code (`{}/`): change it where it comes from, not here"
#: folders that hold copies of code that lives elsewhere, and what to say of a fix there: another project's
#: (vendored), or the package's own repository's, copied at install time (OpenMMLab's `.mim/`)
_COPY_FOLDERS = {
    **dict.fromkeys(("_vendor", "vendor", "vendored", "_vendored", "third_party"), _VENDORED),
    ".mim": "an install-time copy (`{}/`, OpenMMLab's `mim` copies the repository's `tools/` and `configs/` "
    "into the package): change the original, not here",
}
_RAISES = re.compile(r"(^|\.)(assertRaises\w*|raises)$")
_NO_ACCELERATOR = (
    "it is only reached when there is no accelerator, where the rewrite would name the CPU, which the code "
    "chose not to: no change needed"
)
_BEHIND_CHECK = "it only runs on CUDA, behind a CUDA {} that stays: no change needed"
_CPU_OR_CUDA = (
    "its function declares its device `{declared}`, so naming another accelerator here breaks that contract "
    "(and what checks it): widen the declaration and its checks first, then rerun"
)
_ADMITTED = (
    "it runs after a check that turns neuron away (`{check}`): a rewrite for any accelerator here serves a "
    "device that never gets this far; widen the check, and what it admits, first"
)
_PART_OF_CHECK = "it is part of the CUDA {} `{}`, which stays: change them together"


def applies(pending, style: FixStyle) -> bool:
    """Whether this run applies the finding's fix (safe ones always, unsafe ones with --unsafe-fixes)."""
    safety = _safety(pending)
    return safety == "safe" or (safety == "unsafe" and style.unsafe)


def _safety(pending) -> str | None:
    fix = pending.fix
    return None if fix is None else fix.safety or pending.rule.fix_safety


def withdraw(pending, note: str, no_change: bool = False) -> None:
    """Take the fix back, saying why; `no_change`: the code is right as it is (a note, not a to-do)."""
    pending.fix = None
    if no_change:
        pending.no_change = pending.no_change or note
    elif note not in pending.notes:
        pending.notes.append(note)


def make_unsafe(pending, note: str) -> None:
    """Keep the fix for a person's review (`--unsafe-fixes`), saying what to check."""
    pending.fix = replace(pending.fix, safety="unsafe")
    pending.notes.append(note)


def tie(pending, note: str) -> None:
    """Take the fix back because it waits for CUDA code beside it that a person changes first (`note` says
    which): `fix` rewrites it once that is done, so it is a rewrite to review, not work by hand."""
    withdraw(pending, note)
    pending.tied = True


def settle(ctx, positions, lines: list[str], style: FixStyle) -> None:
    pendings = ctx.pending
    vendored = _vendored_folder(ctx.path)
    own_api = _deepspeed_accelerator(ctx, style)
    stale = _stale_import(ctx, style)
    held_back: set[int] = set()  # the findings whose fix the project's declared torch lacks (step 2), by id
    # the notes their rule made (code that works everywhere as it is: a seed CUDA only repeats, cuDNN flags:
    # nnunetv2's and moshi's guards around them, review 49), not those a step below makes
    inherent_notes = [p for p in pendings if p.no_change or p.rule.inert_off_cuda]
    for pending in pendings:
        if pending.fix is not None and vendored is not None:
            withdraw(pending, _COPY_FOLDERS[vendored].format(vendored))
        elif pending.fix is not None and own_api is not None:
            withdraw(pending, _DEEPSPEED_ACCELERATOR.format(own_api))
        elif pending.fix is not None and stale:
            withdraw(pending, stale)
        elif pending.fix is not None and (where := naive_model_parallel(ctx, pending.stack)) is not None:
            withdraw(pending, NAIVE_MODEL_PARALLEL.format(where=where))
        elif (
            pending.fix is not None
            and pending.fix.uses_device
            and (declared := cpu_or_cuda_declared(ctx, pending.stack)) is not None
        ):
            withdraw(pending, _CPU_OR_CUDA.format(declared=declared))
        elif pending.fix is not None and (check := admitted_devices(pending.stack)) is not None:
            withdraw(pending, _ADMITTED.format(check=ctx.code(check)))
        elif pending.fix is not None and without_accelerator_api(ctx, pending.stack):
            withdraw(pending, _FALLBACK, no_change=True)
        elif (
            pending.fix is not None
            and pending.fix.uses_device
            and accelerator(ctx, pending.stack) == "absent"
        ):
            withdraw(pending, _NO_ACCELERATOR, no_change=True)
        elif (
            pending.fix is not None and (version := needs_torch(pending.fix, style.target_torch)) is not None
        ):
            withdraw(pending, _too_new(version, style))
            held_back.add(id(pending))
        elif (
            pending.fix is not None
            and (branch := branch_torch_floor(ctx, pending.stack)) is not None
            and (version := needs_torch(pending.fix, branch[0])) is not None
        ):
            withdraw(
                pending,
                _BRANCH_TOO_OLD.format(version=version, floor=dotted_release(branch[0]), test=branch[1]),
            )
        elif pending.fix is not None and (check := _expected_to_raise(ctx, pending.stack)) is not None:
            withdraw(
                pending,
                f"the code is expected to raise (`{check}`): a rewrite can change the error it checks; no "
                "change needed",
                no_change=True,
            )
        elif (
            pending.fix is not None
            and pending.widens_test
            and (values := parametrized_without_neuron(ctx, pending)) is not None
        ):
            withdraw(
                pending,
                f"the test gets it from `parametrize` values that do not name neuron (`{values}`): it never "
                "asks this of neuron; no change needed (add `neuron` there to test it)",
                no_change=True,
            )
        elif (
            pending.fix is not None and _safety(pending) == "safe" and (note := caution(ctx, pending, style))
        ):
            make_unsafe(pending, note)
    _keep_cuda_checks(ctx, pendings, style, positions, lines, held_back, inherent_notes)

    def overflow(pending, replacement, text: str) -> bool:
        where = positions[replacement.node]
        if where.start.line != where.end.line or where.start.line > len(lines):
            return False
        line = lines[where.start.line - 1]
        return len(line) - (where.end.column - where.start.column) + len(text) > style.line_length

    DeviceNames(ctx, style.line_length, lambda p: applies(p, style), overflow).resolve(pendings)


_BRANCH_TOO_OLD = (
    "the fix needs torch >= {version}, and this code runs from torch {floor} on (`{test}`): write it with "
    "what torch {floor} has, or raise that test"
)


def _too_new(version: str, style: FixStyle) -> str:
    if style.torch_floor:
        floor = dotted_release(style.target_torch)
        return (
            f"the fix needs torch >= {version}, {HELD_BACK} {floor} "
            f"({style.torch_floor}): raise that minimum, or set `target-torch`, to apply it"
        )
    return f"the fix needs torch >= {version}; raise `target-torch` to apply it"


_STALE_IMPORT = (
    "the module imports {}, {}: it fails at import, so it is dead or stale code (port it where it is still "
    "used), unless the build writes that module (build first, then rerun)"
)
_DEEPSPEED_ACCELERATOR = (
    "the {} DeepSpeed's accelerator abstraction (`get_accelerator()`), which names the device for each "
    "accelerator DeepSpeed supports: write this with it, as the rest of its device code is "
    "(`get_accelerator().current_device_name()`, `.device_name(i)`, `.communication_backend_name()`)"
)


def _deepspeed_accelerator(ctx, style: FixStyle) -> str | None:
    """Who uses DeepSpeed's `get_accelerator` (DeepSpeed itself, and projects built on it): the module, or
    another module of the project, as text; None when neither does. Such device code goes through that
    abstraction, not `torch.accelerator`."""
    if "deepspeed.accelerator.get_accelerator" in ctx.scopes.module_table.values():
        return "module imports"
    return "project writes its device code with" if style.deepspeed_accelerator else None


def _stale_import(ctx, style: FixStyle) -> str:
    """Why the module cannot be imported (`style.stale_import`; an import of its own confirmed at its top),
    or ""."""
    written, missing, package = style.stale_import
    if not written or not (package or _imported_at_top(ctx.module, written)):
        return ""
    what = f"its package `{written}`" if package else f"`{written}`"
    lacking = (
        "which is not in the project"
        if written == missing
        else f"which needs `{missing}`, not in the project"
    )
    return _STALE_IMPORT.format(what, lacking)


def _imported_at_top(module: cst.Module, written: str) -> bool:
    """Whether a statement at the top of `module` imports the module `written` (as `StaleImports` read it)."""
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.ImportFrom):
                dots = "." * len(small.relative)
                if f"{dots}{dotted(small.module) if small.module is not None else ''}" == written:
                    return True
            elif isinstance(small, cst.Import) and any(dotted(a.name) == written for a in small.names):
                return True
    return False


def _vendored_folder(path: str) -> str | None:
    """The folder that marks `path` as a copy of code that lives elsewhere: another project's, vendored
    (`torch/_vendor/quack/...`), or the package's own repository's, copied at install time
    (`mmdet/.mim/tools/...`)."""
    parts = path.replace("\\", "/").split("/")[:-1]
    return next((part.lower() for part in parts if part.lower() in _COPY_FOLDERS), None)


def _expected_to_raise(ctx, stack: tuple[cst.CSTNode, ...]) -> str | None:
    """The `with` item (`self.assertRaisesRegex(...)`, `pytest.raises(...)`) whose body holds the end of
    `stack`, as its callee's name, or None."""
    for parent, child in pairwise(stack):
        if isinstance(parent, cst.With) and child is parent.body:
            for item in parent.items:
                call = item.item
                name = ctx.call_name(call) if isinstance(call, cst.Call) else None
                if name and _RAISES.search(name):
                    return name
    return None


def _keep_cuda_checks(
    ctx,
    pendings: list,
    style: FixStyle,
    positions,
    lines: list[str],
    held_back: set[int],
    inherent_notes: list,
) -> None:
    """Step 3, to a fixed point: a check guarding CUDA-only code keeps it CUDA's, and code that only runs on
    CUDA (behind such a check, in a CUDA-named function, …: `cuda_context`) keeps its CUDA calls."""
    checks = [p for p in pendings if p.region]
    libraries = [p for p in pendings if getattr(p.rule, "cuda_library", False)]
    # checks kept CUDA's for what they guard: that code (held back for the torch minimum, maybe) is why
    kept_for_contents: set[int] = set()
    changed = True
    while changed:
        changed = False
        mentions = CudaMentions(
            ctx, covered_nodes(pendings, lambda p: applies(p, style)), style.kernel_modules
        )
        leftovers = [p for p in pendings if getattr(p.rule, "cuda_only", True) and not applies(p, style)]
        waiting_apart = [p for p in leftovers if id(p) not in held_back]
        # what stays CUDA's whatever the run applies: findings without a fix, CUDA settings among them; not
        # tests of the device, which a generic value still answers right (`if device.startswith("cuda"):`)
        sinks = [
            p
            for p in pendings
            if p.fix is None
            and (getattr(p.rule, "cuda_only", True) or p.rule.cuda_setting)
            and not p.rule.device_test
        ]
        for check in checks:
            # a fix, or one only the torch floor holds back
            waits = check.fix is not None or id(check) in held_back
            noted = _guards_only_notes(ctx, check, inherent_notes) if waits else None
            if noted is not None:
                # moshi's seeding guard: no torch makes it worth a change (review 49)
                _release(check, held_back)
                withdraw(
                    check,
                    f"it only guards code that needs no change (`{noted}`), which works everywhere as it is: "
                    "no change needed",
                    no_change=True,
                )
                changed = True
                continue
            if waits:
                reason = _cuda_code_in(ctx, check, leftovers, mentions)
                if reason is not None and id(check) in held_back:
                    reason = _beyond_held_back(ctx, check, pendings, waiting_apart, held_back, style)
                if reason is not None:
                    _release(check, held_back)
                    check.advice = _guarding(check, reason)
                    withdraw(check, check.advice)
                    kept_for_contents.add(id(check))
                    changed = True
                elif (twin := _warning_twin(ctx, check, leftovers)) is not None:
                    tie(
                        check,
                        f"its warning tells where the code runs, which `{first_line(ctx, twin.node)}` still "
                        "decides for CUDA: change them together",
                    )
                    changed = True
            if check.fix is not None and check.widens_test and _safety(check) == "safe":
                risk = widening_risk(ctx, check, libraries, mentions.covered)
                if risk is not None:
                    make_unsafe(check, risk)
                    changed = True
            if applies(check, style):
                continue
            guarded = (*check.region, *flag_side(ctx, check))  # `on_gpu = d.type == "cuda"`: `if on_gpu:` too
            # CUDA's whatever torch is declared, and not because of what it guards
            stays = check.fix is None and id(check) not in held_back and id(check) not in kept_for_contents
            for inner in pendings:
                if stays and id(inner) in held_back and inside(inner, guarded):
                    # raising the minimum would not write it (mergekit's per-device chain, review 43)
                    _release(inner, held_back)
                    withdraw(inner, _BEHIND_CHECK.format(_noun(check)), no_change=True)
                    changed = True
                if inner is not check and inner.fix is not None and inside(inner, guarded):
                    if check.fix is not None and check.node in inner.stack:
                        # part of a check a person reviews (`"cuda" if <here> else "cpu"`, unsafe): it waits
                        tie(inner, _PART_OF_CHECK.format(_noun(check), first_line(ctx, check.node)))
                        inner.part_of = check
                    else:
                        withdraw(inner, _BEHIND_CHECK.format(_noun(check)), no_change=True)
                    changed = True
        for pending in pendings:
            if (
                pending.fix is not None
                and (cuda_only := only_on_cuda(pending, mentions, leftovers, ctx.path)) is not None
            ):
                withdraw(pending, cuda_only.reason, no_change=not cuda_only.needs_change)
                changed = True
            elif (
                _advice_only(pending, held_back)
                and (cuda_only := only_on_cuda(pending, mentions, leftovers, ctx.path)) is not None
                and not cuda_only.needs_change
            ):  # no fix, only the rule's advice to change it: where the code only runs on CUDA, it needs none
                withdraw(pending, cuda_only.reason, no_change=True)
                changed = True
            elif (
                id(pending) in held_back
                and (cuda_only := only_on_cuda(pending, mentions, waiting_apart, ctx.path)) is not None
            ):  # code that only runs on CUDA stays CUDA's whatever torch the project declares: raising the
                # minimum would not write the fix (mergekit's CUDA branch of a per-device chain, review 43);
                # code held back beside it waits for the same minimum and says nothing of that
                _release(pending, held_back)
                withdraw(pending, cuda_only.reason, no_change=not cuda_only.needs_change)
                changed = True
            elif applies(pending, style) and (
                held := _held_back_by(ctx, pending, leftovers, mentions, sinks, positions, lines)
            ):
                note, waits = held
                (tie if waits else withdraw)(pending, note)
                changed = True
        if not changed:  # the ties above give the precise reasons; what stays beside a to-do waits for it
            for pending in pendings:
                if applies(pending, style) and (todo := function_todo(ctx, pending, leftovers, mentions)):
                    tie(
                        pending,
                        f"its function keeps `{todo}` for a person: migrate the function as a whole",
                    )
                    changed = True


def _advice_only(pending, held_back: set[int]) -> bool:
    """Whether a finding came without a fix and nothing has been said of it yet: only its rule's advice
    (poutyne's `self.network.cuda(*args, **kwargs)` in its own `Model.cuda()`: "pass the device by hand"),
    not a CUDA-only library's import (NM7xx: porting work, whatever runs it)."""
    return (
        pending.fix is None
        and not pending.no_change
        and not pending.notes
        and not pending.tied
        and id(pending) not in held_back
        and getattr(pending.rule, "cuda_only", True)
        and not getattr(pending.rule, "cuda_library", False)
    )


def _held_back_by(
    ctx, pending, leftovers: list, mentions: CudaMentions, sinks: list, positions, lines: list[str]
) -> tuple[str, bool] | None:
    """Why CUDA code that stays holds the finding's fix back (`cuda_ties`, the most precise reason first), and
    whether the fix only waits for that code (a tie: `fix` rewrites it once a person has changed it) rather
    than staying CUDA's for good, if it does."""
    if sibling := cuda_sibling(ctx, pending, leftovers, mentions):
        return f"the same call keeps CUDA's `{sibling}`: change its arguments together", True
    if source := cuda_source(ctx, pending, leftovers):
        return f"it takes a value CUDA-only code gives (`{source}`): change them together", True
    if maker := cuda_maker(ctx, pending, leftovers):
        return (
            f"its statement works with what `{maker[0]}` makes, which stays CUDA's (`{maker[1]}`): change "
            "them together",
            True,
        )
    if kept := guarded_leftover(ctx, pending, leftovers):
        return (
            f"its test guards CUDA-only code that stays, such as {kept}: keep this test CUDA's and give "
            "other devices their own path",
            False,
        )
    if kept := rewritten_leftover(ctx, pending, leftovers):
        return f"what it rewrites keeps CUDA-only code that stays, {kept}: change them together", True
    if sink := cuda_sink(pending, sinks, mentions, positions, lines):
        return f"its value goes to CUDA-only code that stays (`{sink}`): change them together", True
    if same := same_call_left(ctx, pending, leftovers):
        return f"{same}: change them together", True
    if helper := helper_of_cuda_function(ctx, pending, leftovers):
        return (
            f"only `{helper[0]}` uses it, which keeps its CUDA check (`{helper[1]}`): migrate them together",
            True,
        )
    if twin := same_test_left(ctx, pending, leftovers):
        return f"`{twin[0]}` keeps the same test CUDA's (`{twin[1]}`): change them together", True
    if test := conjunct_left(pending, mentions):
        return f"its condition also requires `{test}`, which stays CUDA's: change them together", True
    if test := choice_test_left(ctx, pending, leftovers):
        return f"its test `{test}` stays CUDA's for now: change them together", True
    if partner := amp_partner_left(ctx, pending, leftovers):
        return f"the other half of mixed precision stays CUDA's (`{partner}`): change them together", True
    if user := device_fact_user(ctx, pending, leftovers):
        return (
            f"CUDA-only code of the module that stays works with its answer (`{user[1]}` in `{user[0]}`): "
            "change them together",
            True,
        )
    if kept := class_state_left(ctx, pending, leftovers):
        return (
            f"it reads `self.{kept[0]}`, which its class sets in `{kept[1]}` from CUDA code that stays "
            f"(`{kept[2]}`): migrate that first",
            True,
        )
    if listed := vendor_list_left(ctx, pending, leftovers):
        return (
            f"its function takes `{listed}` for the test of an accelerator, which leaves neuron out: add it "
            "there and change them together",
            True,
        )
    return None


def _release(pending, held_back: set[int]) -> None:
    """A fix held back for the project's torch is withdrawn for another reason that holds whatever torch it
    declares: it is no longer counted as held back (raising the minimum would not write it)."""
    if id(pending) in held_back:
        held_back.discard(id(pending))
        pending.notes[:] = [note for note in pending.notes if HELD_BACK not in note]


def _noun(check) -> str:
    """What a finding with a region is: a CUDA check, or a rule's own kind (`with torch.cuda.stream(s):`)."""
    return getattr(check.rule, "region_noun", "check")


class Guarded(NamedTuple):
    """What in a check's region keeps it CUDA's (`cue`, as text), and what kind of thing that is: CUDA-only
    `code`; only `text` (a string, a message, a dict key) where no code there names CUDA; the name that says
    CUDA the check's answer is `stored` under (`is_cuda = d.type == "cuda"`); the name that says CUDA it
    `tests` (`"cuda" if use_cuda else "cpu"`)."""

    cue: str
    kind: str = "code"


def _cuda_code_in(ctx, check, leftovers: list, mentions: CudaMentions) -> Guarded | None:
    """What CUDA-only code stays in the region `check` guards, if any; code before text (a name or call that
    says CUDA before a string that does). After a precondition (`if not available: raise ...`) the rest of
    the block is ordinary code: only CUDA-only calls that stay (findings without a fix) and strong mentions
    (NCCL, CUDA-only libraries, in the code or in the exit's message) keep it CUDA's, not names or messages
    that say CUDA or GPU ("needs a CUDA GPU" means any accelerator there)."""
    for inner in leftovers:
        if inner is not check and inside(inner, check.region) and inner.part_of is not check:
            if inner.region and inside(inner, check.region[:1]):
                continue  # another check in this one's test (`torch.cuda.is_available() and args.cuda`)
            return Guarded(f"`{first_line(ctx, inner.node)}`")
    owner = _precondition_of(check)
    warns = owner is None and _warns_without_accelerator(ctx, check)
    exit_code = () if owner is None else (owner.body,) if isinstance(owner, cst.If) else (owner.msg,)
    scans = (
        [(check.region[0], False), *((node, warns) for node in check.region[1:])]
        if owner is None
        else [
            (check.region[0], False),
            *((node, True) for node in (*exit_code, *check.region[1:]) if node is not None),
        ]
    )
    for node, strong in scans:
        if (cue := mentions.find(node, strong, names_only=True)) is not None:
            return Guarded(f"`{cue}`", _kind_of_name(check, node, cue))
    test = check.region[0]
    if owner is None and (cue := gpu_among_devices(ctx, test, [test])) is not None:
        return Guarded(f"`{cue}`")
    for node, strong in scans:
        if (cue := mentions.find(node, strong, skip=check.node)) is not None:
            return Guarded(f"`{cue}`", "text")
    return None


def _kind_of_name(check, node: cst.CSTNode, cue: str) -> str:
    """What the name `cue` that says CUDA, found in `node` of the check's region, is to the check: where its
    answer is `stored` (a target assigned the check's expression or the name that holds it: tensordict's
    `is_cuda = device_type == "cuda"`, `self.__dict__["_has_cuda_val"] = val`, review 48), part of the test
    it `tests` with (`"cuda" if use_cuda else "cpu"`, `not args.no_cuda and torch.cuda.is_available()`),
    else `code` it guards."""
    if not names_cuda(cue):
        return "code"  # a capability it gates (`flash_attn_available`): the CUDA-only code is behind it
    statement = check.region[0] if check.region else None
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and statement.body else None
    holder = small.targets[0].target if isinstance(small, cst.Assign) and len(small.targets) == 1 else None
    flag = holder.value if isinstance(holder, cst.Name) else None
    for part in check.region:
        for assign in find(part, cst.Assign):
            value = assign.value
            holds = id(check.node) in nodes_under(value) or (
                isinstance(value, cst.Name) and value.value == flag
            )
            if holds and any(_names_key(target.target, cue) for target in assign.targets):
                return "stored"
    if node is not statement:
        return "code"
    if not isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        return "tests" if _tested_names(node, cue) else "code"  # the region's head is the test itself
    for test in find(node, cst.BooleanOperation):
        if id(check.node) in nodes_under(test) and _tested_names(test, cue):
            return "tests"
    return "code"


def _tested_names(test: cst.CSTNode, cue: str) -> list:
    """The names or attribute chains spelled `cue` in `test` that are values, not called
    (`torch.cuda.get_device_capability()` is code)."""
    called = {id(call.func) for call in find(test, cst.Call)}
    return [n for n in find(test, (cst.Name, cst.Attribute)) if id(n) not in called and dotted(n) == cue]


def _names_key(target: cst.BaseExpression, cue: str) -> bool:
    """Whether an assignment target is the name `cue`, or a key `cue` (`self.__dict__["_has_cuda_val"]`)."""
    key = key_of(target)
    return key is not None and (key == cue or key.endswith(f'["{cue}"]'))


def _guarding(check, guarded: Guarded) -> str:
    """Why a check stays CUDA's, given what `_cuda_code_in` found in its region. A check that guards nothing
    (its region is its own statement) and whose statement only names CUDA in text is part of a message
    (`log(f"Cuda Available? {torch.cuda.is_available()}")`, lm-eval, review 43); a check whose region names
    CUDA or GPUs only in text (a log line, a dict key: llamafactory's `info["GPU number"]`, review 44) guards
    no CUDA-only code, but rewritten, that text would speak of CUDA on other accelerators."""
    noun = _noun(check)
    if (
        guarded.kind == "text"
        and len(check.region) == 1
        and isinstance(check.region[0], cst.SimpleStatementLine)
    ):
        return (
            f"it is part of a message that names CUDA or GPUs ({guarded.cue}): rewritten, the message would "
            f"speak of CUDA on other accelerators; reword the message with the {noun}"
        )
    if guarded.kind == "text":
        return (
            f"the code it guards names CUDA or GPUs in its text ({guarded.cue}): rewritten, that text would "
            f"speak of CUDA on other accelerators; keep this {noun} CUDA's, or reword the text with it"
        )
    if guarded.kind == "stored":
        return (
            f"its answer is kept as {guarded.cue}, a name that says CUDA: what reads it expects CUDA; keep "
            f"this {noun} CUDA's, or rename it with the {noun} where that code works on other devices"
        )
    if guarded.kind == "tests":
        return (
            f"it is tested with {guarded.cue}, a name that says CUDA: keep this {noun} CUDA's with it, or "
            "rename it where the code it selects works on other devices"
        )
    return (
        f"it guards CUDA-only code such as {guarded.cue}: keep this {noun} CUDA's and give other devices "
        "their own path"
    )


def _beyond_held_back(
    ctx, check, pendings: list, waiting_apart: list, held_back: set[int], style: FixStyle
) -> Guarded | None:
    """For a check held back for the project's torch: the CUDA-only code it guards apart from fixes held back
    with it (`torch.device("cuda") if torch.cuda.is_available() else ...` under torch 1.8: both wait for
    the same minimum, and raising it writes them together), or None. Saying the check "guards CUDA-only code
    such as `torch.device("cuda")`" would name a fix that only waits (lm-eval, review 43). `waiting_apart`:
    the leftovers not held back."""
    covered = covered_nodes(pendings, lambda p: applies(p, style))
    for pending in pendings:
        if id(pending) in held_back:
            covered |= nodes_under(pending.node)
    return _cuda_code_in(ctx, check, waiting_apart, CudaMentions(ctx, covered, style.kernel_modules))


def _guards_only_notes(ctx, check, notes: list) -> str | None:
    """For an `if` check without an `else` whose body is only statements that hold `notes` (findings their
    rule found right as they are: `torch.cuda.manual_seed_all(s)` right after `torch.manual_seed(s)`, cuDNN
    flags): the first of them, as text. The `if` works everywhere as it is, and rewriting its test would
    change nothing but the line."""
    if len(check.region) != 2 or not isinstance(check.region[1], cst.IndentedBlock):
        return None
    owner = next((n for n in check.stack if isinstance(n, cst.If) and n.test is check.region[0]), None)
    if owner is None or owner.orelse is not None or owner.body is not check.region[1]:
        return None
    for statement in owner.body.body:
        if not any(statement in p.stack for p in notes):
            return None
    return first_line(ctx, owner.body.body[0])


def _warning_twin(ctx, check, leftovers: list):
    """For a check that only warns when there is no accelerator: another finding of its rule in its class (in
    its module outside a class) that stays for a person, if any. transformers' SINQ quantizer warns
    "quantization will run on the CPU" where its `update_device_map` still picks the CPU unless
    `torch.cuda.is_available()`; rewritten alone, the warning would go quiet on Trainium while the model
    still lands on the CPU."""
    if _precondition_of(check) is not None or not _warns_without_accelerator(ctx, check):
        return None
    owner = next((n for n in reversed(check.stack) if isinstance(n, cst.ClassDef)), None)
    twins = [
        inner
        for inner in leftovers
        if inner is not check
        and inner.rule is check.rule
        and not inner.no_change
        and (owner is None or owner in inner.stack)
    ]
    # the same test first (`torch.cuda.is_available()`), then any other call of the rule
    same = [inner for inner in twins if ctx.code(inner.node) == ctx.code(check.node)]
    return (same or twins or [None])[0]


def _warns_without_accelerator(ctx, check) -> bool:
    """Whether the check guards only messages that run when there is no accelerator (`if not
    torch.cuda.is_available(): logger.warning("No CUDA device: running on the CPU")`, no `else`). Rewritten,
    they still say something true where they run ("no CUDA device" on a machine without an accelerator), so
    only strong mentions keep the check CUDA's; kept, the warning would tell a Trainium user that the model
    runs on the CPU. Anything else in the body, or an `else`, may act on the answer elsewhere (torch's
    checkpoint stager keeps a pin-memory flag for a CUDA-only call in another method): it stays."""
    test = check.region[0]
    owner = next((n for n in check.stack if isinstance(n, cst.If) and n.test is test), None)
    if owner is None or owner.orelse is not None or owner.body not in check.region:
        return False
    if implies(ctx, test)[0] != "absent" or not isinstance(owner.body, cst.IndentedBlock):
        return False
    return all(
        isinstance(statement, cst.SimpleStatementLine)
        and all(
            isinstance(s, cst.Expr) and isinstance(s.value, cst.Call) and is_message(s.value)
            for s in statement.body
        )
        for statement in owner.body.body
    )


def _precondition_of(check) -> cst.If | cst.Assert | None:
    """The `if` when the check's region is "the code after `if <no accelerator>: <exit>`" rather than a
    body, or the `assert` whose test it is (the code after it)."""
    test = check.region[0]
    owner = next((n for n in check.stack if isinstance(n, (cst.If, cst.Assert)) and n.test is test), None)
    if isinstance(owner, cst.Assert):
        return owner
    return owner if owner is not None and owner.orelse is None and owner.body not in check.region else None
