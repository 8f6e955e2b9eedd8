"""`neuron-migrate rules [CODE]`: list the rules, or print one rule's documentation."""

from __future__ import annotations

import typer

from neuron_migrate.errors import UsageError


def rules_command(
    code: str | None = typer.Argument(
        None, help="A rule code (NM101) or prefix (NM1); all rules when omitted."
    ),
    output_format: str = typer.Option(
        "text", "--format", help="text | md (md of all rules is docs/rules.md)."
    ),
) -> None:
    """Show what each rule finds, why it matters on Trainium, and how it is fixed."""
    from rich.console import Console
    from rich.markdown import Markdown
    from rich.table import Table

    from neuron_migrate.migrate.rule import load_rules
    from neuron_migrate.migrate.rule_docs import rule_markdown, rules_markdown

    rules = load_rules()
    if output_format not in ("text", "md"):
        raise UsageError(f"--format {output_format!r}: choose text or md")
    chosen = [rule for c, rule in rules.items() if code is None or c.startswith(code.upper())]
    if not chosen:
        raise UsageError(f"no rule code starts with {code!r}; run `neuron-migrate rules` for the list")
    console = Console()
    if output_format == "md":
        typer.echo(
            rules_markdown() if code is None else "\n".join(rule_markdown(r) for r in chosen), nl=False
        )
        return
    if code is not None and len(chosen) == 1:
        console.print(Markdown(rule_markdown(chosen[0])))
        return
    table = Table(show_edge=False)
    for column in ("code", "name", "category", "severity", "fix"):
        table.add_column(column)
    for rule in chosen:
        table.add_row(rule.code, rule.name, rule.category(), rule.severity, rule.fix_safety)
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("rules")(rules_command)
