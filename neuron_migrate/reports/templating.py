"""The one jinja2 environment and its escaping filters, for every templated page (report and fleet, HTML and
Markdown), and for the Markdown that is written without a template (`check`). Templates are package data under
`reports/templates/`; `*.html.j2` are autoescaped, Markdown templates escape through the `md` and `mdcode`
filters. jinja2 is imported on first render, so importing the filters costs nothing."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2
    import markupsafe


def html_ticks(text: object) -> markupsafe.Markup:
    """Escape `text`, then show its `code spans` as <code> (safe: the markup is added after escaping)."""
    import markupsafe

    escaped = str(markupsafe.escape(str(text)))
    return markupsafe.Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped))


def md_text(text: object) -> str:
    """Text that cannot break a Markdown table or smuggle HTML into a PR comment."""
    return (
        str(text)
        .replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("\n", " ")
    )


def md_code(text: object) -> str:
    """A Markdown code span holding `text` verbatim, usable inside a table cell (a code span shows `<` and `>`
    as themselves; it needs a fence longer than any run of backticks inside)."""
    text = str(text).replace("\n", " ").replace("|", "\\|")
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}" if text else ""


def percent(value: float) -> str:
    return f"{value:.1%}"


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The environment every renderer uses (built once)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("neuron_migrate.reports", "templates"),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default_for_string=False),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["ticks"] = html_ticks
    env.filters["md"] = md_text
    env.filters["mdcode"] = md_code
    env.filters["pct"] = percent
    return env


def render_template(name: str, **context: object) -> str:
    """Render the package template `name` (e.g. `report.html.j2`) with `context`."""
    return environment().get_template(name).render(**context)
