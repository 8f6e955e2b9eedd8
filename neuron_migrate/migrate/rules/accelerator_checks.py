"""What NM104 and NM105 share: a CUDA test rewritten as a test for CUDA or neuron, and its report (the
report inside a per-device chain also serves the availability checks of NM106)."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.migrate.chains import device_chain
from neuron_migrate.migrate.device_literals import cuda_and_neuron, fit
from neuron_migrate.migrate.patterns import check_region
from neuron_migrate.migrate.records import problem
from neuron_migrate.migrate.rule import FixSpec, Replacement, Rule


def _negated(ctx) -> bool:
    return isinstance(ctx.parent, cst.UnaryOperation) and isinstance(ctx.parent.operator, cst.Not)


def neuron_test(
    rule: Rule,
    node: cst.CSTNode,
    subject: str,
    positive: bool,
    title: str,
    quote: str = '"',
) -> FixSpec:
    """Replace the CUDA test `node` by `subject in ("cuda", "neuron")` (`not in` when not `positive`),
    absorbing an enclosing `not`. `subject` is what the test compared with `"cuda"` (`device.type`, a device
    string): every device but neuron gets the answer it got before, and neuron takes CUDA's side."""
    ctx = rule.ctx
    if _negated(ctx):
        node, positive, parent = ctx.parent, not positive, ctx.ancestor(2)
    else:
        parent = ctx.parent
    test = f"{subject} {'in' if positive else 'not in'} {cuda_and_neuron(quote)}"
    text = fit(test, parent, comparison=True)
    imports = ("torch",) if "torch." in text else ()
    return FixSpec(title, (Replacement(node, text),), imports=imports)


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
