"""After the walk, before positions become edits: which fixes stand, and how they name the device.

In order, for every finding with a fix:

1. code that only runs when `torch.accelerator` itself is missing (an old-torch fallback branch) keeps its
   CUDA calls: the fix is withdrawn;
2. a fix that needs a newer torch than the project's `target-torch` is withdrawn, saying which version;
3. a CUDA check whose guarded code keeps CUDA-only calls (a finding left without a fix that this run applies,
   or a CUDA-only library, kernel or capability query by name) stays a CUDA check: its fix is withdrawn, and
   so are the fixes of the code under it (it runs on CUDA only, where it is right as it is). Repeated until
   nothing changes, since withdrawing one check's fix can keep the check around it;
4. a fix that removes a statement takes the fixes inside that statement with it (they would overlap);
5. the device placeholders of the remaining fixes are resolved (`naming.py`).
"""

from __future__ import annotations

import libcst as cst

from neuron_migrate.migrate.api_versions import needs_torch
from neuron_migrate.migrate.fixes import FixStyle
from neuron_migrate.migrate.guards import without_accelerator_api
from neuron_migrate.migrate.naming import DeviceNames
from neuron_migrate.migrate.patterns import CUDA_ONLY_CODE

def applies(pending, style: FixStyle) -> bool:
    """Whether this run applies the finding's fix (safe ones always, unsafe ones with --unsafe-fixes)."""
    fix = pending.fix
    if fix is None:
        return False
    safety = fix.safety or pending.rule.fix_safety
    return safety == "safe" or (safety == "unsafe" and style.unsafe)


def withdraw(pending, note: str) -> None:
    pending.fix = None
    if note not in pending.notes:
        pending.notes.append(note)


def settle(ctx, positions, lines: list[str], style: FixStyle) -> None:
    pendings = ctx.pending
    for pending in pendings:
        if pending.fix is not None and without_accelerator_api(ctx, pending.stack):
            withdraw(pending, "in a fallback for a torch without `torch.accelerator`: leave it as it is")
        elif pending.fix is not None and (version := needs_torch(pending.fix, style.target_torch)) is not None:
            withdraw(pending, f"the fix needs torch >= {version}; raise `target-torch` to apply it")
    _keep_cuda_checks(ctx, pendings, style)
    _removals_take_inner_fixes(pendings, style)

    def overflow(pending, replacement, text: str) -> bool:
        where = positions[replacement.node]
        if where.start.line != where.end.line or where.start.line > len(lines):
            return False
        line = lines[where.start.line - 1]
        return len(line) - (where.end.column - where.start.column) + len(text) > style.line_length

    DeviceNames(ctx, style.line_length, lambda p: applies(p, style), overflow).resolve(pendings)


def _inside(pending, region: tuple[cst.CSTNode, ...]) -> bool:
    return any(node in pending.stack or node is pending.node for node in region)


def _keep_cuda_checks(ctx, pendings: list, style: FixStyle) -> None:
    """Step 3: a check that stays CUDA (its fix withdrawn or not applied) keeps the code it guards as it is."""
    checks = [p for p in pendings if p.region]
    changed = True
    while changed:
        changed = False
        for check in checks:
            if applies(check, style):
                reason = _cuda_code_in(ctx, check, pendings, style)
                if reason is None:
                    continue
                withdraw(check, f"it guards CUDA-only code ({reason}): keep this check CUDA-only and give "
                                "other devices their own path")
                changed = True
            for inner in pendings:
                if inner is not check and inner.fix is not None and _inside(inner, check.region):
                    withdraw(inner, "it only runs on CUDA (behind a CUDA check that stays): no change needed")
                    changed = True


def _cuda_code_in(ctx, check, pendings: list, style: FixStyle) -> str | None:
    """What CUDA-only code stays in the region `check` guards, if any."""
    for inner in pendings:
        if inner is check or not _inside(inner, check.region):
            continue
        if getattr(inner.rule, "cuda_only", True) and not applies(inner, style):
            return f"`{_first_line(ctx, inner.node)}`"
    for node in check.region:
        match = CUDA_ONLY_CODE.search(ctx.code(node))
        if match:
            return f"`{match.group(0)}`"
    return None


def _removals_take_inner_fixes(pendings: list, style: FixStyle) -> None:
    removed = [r.node for p in pendings if applies(p, style) for r in p.fix.replacements if r.text in ("", "pass")
               and isinstance(r.node, (cst.BaseCompoundStatement, cst.SimpleStatementLine))]
    for pending in pendings:
        if pending.fix is not None and any(node in pending.stack for node in removed) and not any(
                r.node in removed for r in pending.fix.replacements):
            withdraw(pending, "the statement around it is removed by another fix")


def _first_line(ctx, node: cst.CSTNode) -> str:
    text = ctx.code(node).strip().splitlines()
    line = text[0] if text else ""
    return line if len(line) <= 60 else line[:57] + "..."
