"""What NM104 and NM105 share: a CUDA test rewritten as a test for any accelerator, and its report (the
report inside a per-device chain also serves the availability checks of NM106)."""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.migrate.chains import device_chain
from neuron_migrate.migrate.device_literals import fit
from neuron_migrate.migrate.patterns import check_region
from neuron_migrate.migrate.records import problem
from neuron_migrate.migrate.rule import FixSpec, Replacement, Rule


def _negated(ctx) -> bool:
    return isinstance(ctx.parent, cst.UnaryOperation) and isinstance(ctx.parent.operator, cst.Not)


def _asks_for_index(ctx, type_text: str) -> bool:
    """Whether an `and` around the visited test also asks that the device `type_text` is the type of has no
    index (`device.index is None`; `is not None` already leaves the meta device out)."""
    owner = type_text.removesuffix(".type")
    if owner == type_text:
        return False
    asks = re.compile(rf"(?<![\w.]){re.escape(owner)}\.index\s+is\s+None\b")
    for node in reversed(ctx.stack[:-1]):
        if isinstance(node, cst.UnaryOperation) or (
            isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.And)
        ):
            if isinstance(node, cst.BooleanOperation) and asks.search(ctx.code(node)):
                return True
            continue
        return False
    return False


def accelerator_test(
    rule: Rule,
    node: cst.CSTNode,
    type_text: str,
    positive: bool,
    title: str,
    unsafe: bool = False,
    index: str | None = None,
) -> FixSpec:
    """Replace `node` by `type_text != "cpu"` (`== "cpu"` when not `positive`), absorbing an enclosing `not`.

    `index`: the original test also asked for a device index (`"some"`: `d.startswith("cuda:")`) or for none
    (`"none"`: `d == "cuda"` is false for `"cuda:1"`); such a string test also leaves out `"meta"`, which
    `!= "cpu"` would let in (`device_map == "cuda"` must stay false for `device_map="meta"`). So does a test
    whose `and` asks that the same device has no index (`device.type == "cuda" and device.index is None`:
    Lightning's device mixin gave a module on the meta device, which has no index either, a CUDA index)."""
    ctx = rule.ctx
    if _negated(ctx):
        node, positive, parent = ctx.parent, not positive, ctx.ancestor(2)
    else:
        parent = ctx.parent
    test = f'{type_text} {"!=" if positive else "=="} "cpu"'
    if index is None and _asks_for_index(ctx, type_text):
        test = f'{type_text} {"not in" if positive else "in"} ("cpu", "meta")'
    if index is not None:  # a string the caller chose: `"meta"` (a common device_map) is no accelerator
        test = f'{type_text} {"not in" if positive else "in"} ("cpu", "meta")'
        attribute = type_text.removesuffix(".type") + ".index"
        has = "is not None" if index == "some" else "is None"
        lacks = "is None" if index == "some" else "is not None"
        test = f"{test} and {attribute} {has}" if positive else f"{test} or {attribute} {lacks}"
    text = fit(test, parent, comparison=index is None)
    imports = ("torch",) if "torch." in text else ()
    return FixSpec(title, (Replacement(node, text),), imports=imports, safety="unsafe" if unsafe else None)


def report_check(rule: Rule, node: cst.CSTNode, message: str, fix: FixSpec) -> None:
    """Report a device check with its fix; the code it guards decides after the walk whether the fix stands
    (`settle`). A check in an `if`/`elif` chain with branches for other accelerators gets no fix: made
    accelerator-generic, it would take their branches too."""
    if reported_in_device_chain(rule, node, message):
        return
    pending = rule.report(node, message, fix, region=check_region(rule.ctx))
    pending.widens_test = True


def reported_in_device_chain(rule: Rule, node: cst.CSTNode, message: str) -> bool:
    """In an `if`/`elif` chain with branches for other accelerators, report the check without a fix (still a
    check: the code under it stays CUDA's) and say so; elsewhere report nothing."""
    chain = device_chain(rule.ctx)
    if not chain:
        return False
    rule.report(
        node,
        f"{problem(message)}: {chain.advice()}",
        region=check_region(rule.ctx),
        no_change=chain.advice() if chain.has_neuron else None,
    )
    return True
