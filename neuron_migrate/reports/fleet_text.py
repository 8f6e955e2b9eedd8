"""`fleet`'s human summary on stderr (rich): shares per mode, verdict counts, the top ranked ops, failures."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from neuron_migrate.fleet.matrix import VERDICT_LABELS, VERDICTS, FleetResult


def render_summary(result: FleetResult, console: Console, top: int = 10) -> None:
    """The human summary on stderr: shares per mode, verdict counts, the top ranked ops, and what failed."""
    shard = f", shard {result.shard}" if result.shard else ""
    console.print(
        f"[bold]fleet[/] {result.task} ({' and '.join(result.modes)}{shard}) on {result.device} "
        f"({result.backend or 'nothing ran'}): {result.summary.total} architectures, "
        f"{result.traced} traced, {result.from_cache} from cache; opdb {result.opdb_version}",
        highlight=False,
    )
    if result.opdb_pre_release:
        console.print(
            "[bold yellow]PRE-RELEASE opdb snapshot[/]: statuses may differ on a real torch-neuronx"
        )
    for mode in result.modes:
        s = result.summaries[mode]
        console.print(
            f"[bold]{mode}: {s.runs}/{s.total} run on neuron ({s.runs_share:.1%}), {s.counts['native']} "
            f"natively ({s.native_share:.1%})[/]; of the {s.buildable} that build here "
            f"{s.runs_share_of_buildable:.1%} run, {s.native_share_of_buildable:.1%} natively",
            highlight=False,
        )
        console.print(
            "  " + "  ".join(f"{VERDICT_LABELS[v]}: {s.counts[v]}" for v in VERDICTS), highlight=False
        )
    console.print(f"definition: {result.summary.definition}", highlight=False)
    if result.ranking and top:
        table = Table(
            title=f"ops blocking or slowing the most architectures ({result.modes[0]}, top "
            f"{min(top, len(result.ranking))})",
            title_justify="left",
        )
        for column in ("op", "blocks", "fails in", "slows", "alone", "unlock step", "native after"):
            if column == "op":
                table.add_column(column, min_width=24, overflow="fold")
            else:
                table.add_column(column, justify="right")
        for rank in result.ranking[:top]:
            table.add_row(
                rank.op,
                str(rank.blocks),
                str(rank.fails),
                str(rank.slows),
                str(rank.sole),
                str(rank.unlock_step or ""),
                "" if rank.cumulative_native is None else str(rank.cumulative_native),
            )
        console.print(table)
    failed = [a for a in result.architectures if a.verdict not in ("native", "fallbacks")]
    for arch in failed[:top]:
        console.print(
            f"  {arch.model_type} ({arch.mode}): {VERDICT_LABELS[arch.verdict]}: {arch.reason}",
            highlight=False,
            markup=False,
        )
    if len(failed) > top:
        console.print(f"  … and {len(failed) - top} more (see --format md/html/json)")
