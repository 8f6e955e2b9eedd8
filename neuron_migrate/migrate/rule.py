"""The rule base class, the examples every rule carries, and the registry rules join by subclassing.

A rule is one class with a stable code (`NM101`), a one-line message, a docstring in the sections
What it does / Why it matters on Trainium / Example / Use instead / Fix safety, and its own VALID and INVALID
examples. Tests and `docs/rules.md` are generated from those examples, so docs, tests and behaviour cannot
drift apart.

A rule instance lives for one file. The analyzer calls its `visit_<NodeType>(node)` and
`leave_<NodeType>(node)` methods (libcst node class names) during one shared traversal, and `finish()` at the
end of the file.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import libcst as cst

from neuron_migrate.migrate.fixes import FixSpec, Replacement
from neuron_migrate.model import Finding, FixSafety, Severity

if TYPE_CHECKING:
    from neuron_migrate.migrate.context import FileContext, PendingFinding
    from neuron_migrate.migrate.lexicon import Lexicon

__all__ = ["RULES", "FixSpec", "Invalid", "Replacement", "Rule", "load_rules", "select_rules"]

RULES: dict[str, type[Rule]] = {}
DOC_SECTIONS = ("What it does", "Why it matters on Trainium", "Example", "Use instead", "Fix safety")
CATEGORY_OF_PREFIX = {
    "NM1": "device",
    "NM2": "amp",
    "NM3": "distributed",
    "NM4": "runtime",
    "NM5": "compile",
    "NM6": "environment",
    "NM7": "manual",
    "NM8": "numerics",
    "NM9": "internal",
}


@dataclass(frozen=True)
class Invalid:
    """Code the rule must flag `count` times; `fixed` is the whole file after the rule's fix (None: no
    fix)."""

    code: str
    fixed: str | None = None
    count: int = 1


#: what a file-level rule is reported for: a CUDA source file in the tree, a file that cannot be parsed, one
#: that cannot be read or decoded, one whose analysis failed
FILE_KINDS = ("kernel-source", "unparsable", "unreadable", "analysis-failure")


class Rule:
    """Base class of every rule; subclasses register themselves by their `code`."""

    code: ClassVar[str] = ""
    name: ClassVar[str] = ""
    message: ClassVar[str] = ""
    severity: ClassVar[Severity] = "warning"
    fix_safety: ClassVar[FixSafety] = "none"
    #: pre-filter: a file must contain at least one of these to be able to hold a finding; a tuple entry
    #: matches only when the file contains all of its byte strings. Every use of a `torch.cuda` name spells
    #: `cuda` somewhere (the attribute chain or the import), so `b"cuda"` serves the rules for those names.
    triggers: ClassVar[tuple[bytes | tuple[bytes, ...], ...]] = ()
    #: reported by the scanner from the file itself (no visitor, no examples), for one of `FILE_KINDS`
    file_level: ClassVar[str | None] = None
    #: the row of the effort table its findings cost (`reports/effort.py`); None: decided by its fix
    effort: ClassVar[str | None] = None
    #: its findings build kernels: when the tree holds their sources (a `kernel-source` rule), the kernels
    #: are counted there and these findings cost only the build wiring
    builds_kernels: ClassVar[bool] = False
    #: its findings are code that only works on CUDA: left unfixed inside a CUDA check, they keep that check
    #: CUDA-only (False for advice that holds on any device: numerics, settings that are harmless elsewhere)
    cuda_only: ClassVar[bool] = True
    #: its findings are CUDA-only libraries or kernels the file uses: a CUDA device-type test elsewhere in the
    #: file may be choosing them, so making it generic is unsafe (`settle`)
    cuda_library: ClassVar[bool] = False
    #: its findings configure CUDA (`CUDA_VISIBLE_DEVICES`): a value the run would rewrite that flows into
    #: one left as it is stays CUDA's (`settle`)
    cuda_setting: ClassVar[bool] = False
    #: its findings test whether a device is CUDA: a value that reaches one still answers it right
    device_test: ClassVar[bool] = False
    #: its findings are a CUDA design with no Trainium counterpart (CUDA graph capture): a function that
    #: keeps one is ported as a whole by a person, so its other fixes are withdrawn (`cuda_context`)
    cuda_design: ClassVar[bool] = False
    #: its findings keep a function from running on another device as a whole, so its other fixes wait for
    #: them (`cuda_ties.function_todo`); False for a part a person replaces while the rest stays right (a
    #: `DataParallel` wrapper: the moves around it are still needed once it is DDP)
    holds_function: ClassVar[bool] = True
    #: its findings save or restore per-device generator states, which a checkpoint may carry from one
    #: device type to another (`cautions`)
    generator_state: ClassVar[bool] = False
    #: its findings are settings that do nothing off CUDA (cuDNN and CUDA backend flags): an `if` around
    #: nothing else guards nothing (`settle`)
    inert_off_cuda: ClassVar[bool] = False
    VALID: ClassVar[tuple[str, ...]] = ()
    INVALID: ClassVar[tuple[Invalid, ...]] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.code:
            return
        if cls.code in RULES and RULES[cls.code].__qualname__ != cls.__qualname__:
            raise RuntimeError(
                f"rule code {cls.code} is used by {RULES[cls.code].__name__} and {cls.__name__}"
            )
        RULES[cls.code] = cls

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    @classmethod
    def category(cls) -> str:
        return CATEGORY_OF_PREFIX[cls.code[:3]]

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """A necessary condition for a finding of this rule in a file whose code spells `lex` (`lexicon.py`).

        The pre-pass (`prepass.py`) leaves the rule out of a file where this is False, and a file left with
        no rule costs no libcst parse. It must never be False where the rule reports: a rule whose logic
        changes reviews its condition. The default analyses every file the byte `triggers` let through."""
        return True

    def report(
        self,
        node: cst.CSTNode,
        message: str | None = None,
        fix: FixSpec | None = None,
        region: tuple[cst.CSTNode, ...] = (),
        replacement: str | None = None,
        no_change: str | None = None,
    ) -> PendingFinding:
        """Record a finding at `node` (message defaults to the rule's).

        `region`: the code a CUDA check guards. Its fix (a device-agnostic test) is withdrawn after the walk
        when CUDA-only code stays in that region, so the check keeps it on CUDA. `replacement`: what to move
        to, when that is another library or API (reports read it; the message says it in words). `no_change`:
        why this code needs no change (the finding becomes a note that says so)."""
        return self.ctx.add(self, node, message or self.message, fix, region, replacement, no_change)

    def finish(self) -> None:
        """Called once after the traversal (for rules that decide at the end of the file)."""

    @classmethod
    def doc_sections(cls) -> dict[str, str]:
        """The docstring split into its named sections (`What it does`, …)."""
        text = _dedent_doc(cls.__doc__ or "")
        heads = "|".join(re.escape(h) for h in DOC_SECTIONS)
        parts = re.split(rf"^({heads}):?\s*$", text, flags=re.M)
        sections = {}
        for head, body in zip(parts[1::2], parts[2::2], strict=True):
            sections[head] = body.strip("\n")
        return sections


def _dedent_doc(doc: str) -> str:
    lines = doc.expandtabs().splitlines()
    indents = [len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()]
    cut = min(indents, default=0)
    return "\n".join([lines[0].strip()] + [line[cut:] for line in lines[1:]]) if lines else ""


def load_rules() -> dict[str, type[Rule]]:
    """Import every module under `neuron_migrate.migrate.rules` (each registers its rules); codes sorted."""
    from neuron_migrate.migrate import rules as package

    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")
    return dict(sorted(RULES.items()))


def select_rules(select: tuple[str, ...] = (), ignore: tuple[str, ...] = ()) -> dict[str, type[Rule]]:
    """Rules whose code starts with one of `select` (all when empty) and with none of `ignore`."""
    from neuron_migrate.errors import UsageError

    rules = load_rules()
    for prefix in (*select, *ignore):
        if not any(code.startswith(prefix.upper()) for code in rules):
            known = ", ".join(rules)
            raise UsageError(f"--select/--ignore: no rule code starts with {prefix!r}; known codes: {known}")
    chosen = {
        code: rule
        for code, rule in rules.items()
        if (not select or any(code.startswith(p.upper()) for p in select))
        and not any(code.startswith(p.upper()) for p in ignore)
    }
    return chosen


def file_rule(rules: dict[str, type[Rule]], kind: str) -> type[Rule] | None:
    """The rule among `rules` reported for files of `kind` (one of `FILE_KINDS`), None when not selected."""
    return next((rule for rule in rules.values() if rule.file_level == kind), None)


def file_finding(
    rules: dict[str, type[Rule]], kind: str, rel: str, message: str, line: int = 1, col: int = 0
) -> list[Finding]:
    """The finding of the file-level rule of `kind` for file `rel`, if that rule is selected."""
    rule = file_rule(rules, kind)
    if rule is None:
        return []
    line = max(line, 1)
    return [Finding(rule.code, rule.severity, rule.category(), rel, line, col, line, col, message)]
