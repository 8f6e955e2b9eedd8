"""Import TorchNeuron's operator compatibility table (`docs/torch_api_compatibility.md`) as an opdb snapshot.

The table lists public PyTorch APIs namespace by namespace with a value `Y` / `CPU_FALLBACK` / `N` and a
limitations column (`Native`, `Host-only`, `Needs a process group`; for CPU_FALLBACK the ATen op that falls
back and the dtypes affected). The real column headers are not published, so columns are found by content and
heading words. Rows map to ATen ops as follows:

1. ATen names written in the limitations text (`aten::linalg_qr`, `aten::add.Tensor`) are used as given; a
   bare name covers all its overloads.
2. Otherwise the API name is mapped (see `API_PREFIXES`): `torch.X`, `torch.Tensor.X`, `torch.nn.functional.X`
   -> `aten::X`; `torch.linalg.X` -> `aten::linalg_X`; `torch.special.X` -> `aten::special_X`;
   `torch.fft.X` -> `aten::fft_X`. Such entries say "mapped from public API name" in their note; when torch is
   importable, a mapped name that is not an ATen op is dropped (counted in `ImportStats.unmapped`).

Value -> status: `Y` -> native (class from the limitations text); `CPU_FALLBACK` -> cpu_fallback, or, when the
text names dtypes, native with those dtypes cpu_fallback (the table names the affected dtypes only "where
coverage differs by data type"); `N` -> unsupported. Ops the table does not list are `unknown`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from neuron_migrate.errors import InputFileError
from neuron_migrate.opdb.db import KLASSES, DtypeEntry, OpEntry, Snapshot, normalize_dtype

VALUES = {
    "Y": "Y",
    "YES": "Y",
    "N": "N",
    "NO": "N",
    "CPU_FALLBACK": "CPU_FALLBACK",
    "CPU FALLBACK": "CPU_FALLBACK",
    "CPU-FALLBACK": "CPU_FALLBACK",
}
STATUS_OF = {"Y": "native", "CPU_FALLBACK": "cpu_fallback", "N": "unsupported"}
API_PREFIXES = (  # longest first: public namespace -> ATen name prefix
    ("torch.nn.functional.", ""),
    ("torch.Tensor.", ""),
    ("torch.linalg.", "linalg_"),
    ("torch.special.", "special_"),
    ("torch.fft.", "fft_"),
    ("torch.", ""),
)
_API_HEAD = ("api", "name", "function", "operator", "op", "symbol", "method")
_VALUE_HEAD = ("support", "status", "value", "neuron")
_LIMIT_HEAD = ("limitation", "note", "comment", "remark", "detail", "restriction", "class")
_ATEN = re.compile(r"aten::[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?")
_DTYPE = re.compile(
    r"\b(float64|float32|float16|bfloat16|fp64|fp32|fp16|bf16|int64|int32|int16|int8|uint8|"
    r"complex128|complex64|complex32|bool|double|half)\b",
    re.IGNORECASE,
)
_SEP = re.compile(r"^\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")


@dataclass(frozen=True)
class TableRow:
    """One data row: the API, its value, its limitations text, the namespace heading and its line number."""

    api: str
    value: str
    limits: str
    section: str
    line: int


@dataclass
class ImportStats:
    """What the import did with the rows, for the CLI summary."""

    rows: int = 0
    entries: int = 0
    unmapped: list[str] = field(default_factory=list)


def _cells(line: str) -> list[str]:
    inner = line.strip().strip("|")
    return [c.strip() for c in re.split(r"(?<!\\)\|", inner)]


def _plain(cell: str) -> str:
    # Strip code spans and bold; underscores stay (they are part of op names).
    return cell.replace("`", "").replace("**", "").replace("\\_", "_").strip()


def _tables(lines: list[str]) -> list[tuple[int, str, list[str], list[tuple[int, list[str]]]]]:
    """Markdown tables as (header line number, section heading, header cells, [(line number, cells)])."""
    tables, section, i = [], "", 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("#"):
            section = line.lstrip("# ").strip()
        if line.strip().startswith("|") and i + 1 < len(lines) and _SEP.match(lines[i + 1].strip()):
            header, body, j = _cells(line), [], i + 2
            while j < len(lines) and lines[j].strip().startswith("|"):
                body.append((j + 1, _cells(lines[j])))
                j += 1
            tables.append((i + 1, section, header, body))
            i = j
            continue
        i += 1
    return tables


def _cell(cells: list[str], k: int | None) -> str:
    return cells[k] if k is not None and k < len(cells) else ""


def _value_of(cell: str) -> str | None:
    return VALUES.get(_plain(cell).upper())


def _find_columns(header: list[str], body: list[tuple[int, list[str]]]) -> tuple[int, int, int | None] | None:
    """(api, value, limitations) column indexes, or None if no column holds Y / CPU_FALLBACK / N values."""
    n = len(header)
    if not body:
        return None
    score = [sum(1 for _, c in body if k < len(c) and _value_of(c[k])) for k in range(n)]
    value = max(range(n), key=lambda k: (score[k], any(w in header[k].lower() for w in _VALUE_HEAD)))
    if score[value] * 2 < len(body):
        return None
    looks_api = [sum(1 for _, c in body if k < len(c) and _plain(c[k]).startswith("torch")) for k in range(n)]
    others = [k for k in range(n) if k != value]
    if not others:
        return None
    api = max(others, key=lambda k: (looks_api[k], any(w in header[k].lower() for w in _API_HEAD), -k))
    rest = [k for k in others if k != api]
    limits = None
    if rest:
        limits = max(rest, key=lambda k: (any(w in header[k].lower() for w in _LIMIT_HEAD), -k))
    return api, value, limits


def parse_table(path: str | Path) -> list[TableRow]:
    """All data rows of every table that has a Y / CPU_FALLBACK / N column; one error line if there is
    none."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise InputFileError(f"{p}: cannot read the compatibility table ({err}); pass the .md file") from None
    rows: list[TableRow] = []
    tables = _tables(lines)
    for _, section, header, body in tables:
        cols = _find_columns(header, body)
        if cols is None:
            continue
        api, value, limits = cols
        for number, cells in body:
            val = _value_of(_cell(cells, value))
            if val is None:
                raise InputFileError(
                    f"{p}:{number}: value {_cell(cells, value)!r} is not Y, CPU_FALLBACK or N; fix the row"
                )
            rows.append(
                TableRow(_plain(_cell(cells, api)), val, _plain(_cell(cells, limits)), section, number)
            )
    if not rows:
        where = tables[0][0] if tables else 1
        raise InputFileError(
            f"{p}:{where}: no markdown table with a Y / CPU_FALLBACK / N column found; "
            "is this torch_api_compatibility.md?"
        )
    return rows


def aten_name_for_api(api: str) -> str | None:
    """The documented public-API -> ATen base name mapping, or None for namespaces with no ATen
    counterpart."""
    api = api.removesuffix("()").strip()
    for prefix, aten_prefix in API_PREFIXES:
        if api.startswith(prefix):
            name = api[len(prefix) :]
            return f"aten::{aten_prefix}{name}" if re.fullmatch(r"[A-Za-z0-9_]+", name) else None
    return None


def _aten_exists(name: str) -> bool | None:
    try:
        import torch
    except ImportError:
        return None  # cannot check without torch; keep the mapped name
    return hasattr(torch.ops.aten, name.split("::", 1)[1].split(".", 1)[0])


def _entry_for(row: TableRow, source: str, date: str, mapped: bool) -> OpEntry:
    klass = next((k for k in KLASSES if k.lower() in row.limits.lower()), None)
    dtypes = sorted({normalize_dtype(d) for d in _DTYPE.findall(row.limits)})
    note = row.limits + ("; mapped from public API name " + row.api if mapped else f" ({row.api})")
    status = STATUS_OF[row.value]
    per_dtype = {}
    if row.value == "CPU_FALLBACK" and dtypes:
        # The table names dtypes only "where coverage differs by data type": the others are not affected.
        status = "native"
        per_dtype = {d: DtypeEntry("cpu_fallback", f"CPU_FALLBACK for {d}: {row.limits}") for d in dtypes}
    elif dtypes:
        per_dtype = {d: DtypeEntry(status, row.limits) for d in dtypes}
    return OpEntry(status, klass, "", note.strip("; "), source, date, per_dtype)


def build_snapshot(
    rows: list[TableRow], *, version: str, source: str, date: str, check_names: bool = True
) -> tuple[Snapshot, ImportStats]:
    """Snapshot from parsed rows. Explicit ATen names win over mapped API names; the first row for an op wins
    among equals. `source` is a URL (gets `#L<line>`) or a path (gets `:<line>`)."""
    stats = ImportStats(rows=len(rows))
    ops: dict[str, tuple[bool, OpEntry]] = {}  # op -> (explicit, entry)
    for row in rows:
        where = f"{source}#L{row.line}" if "://" in source else f"{source}:{row.line}"
        named = _ATEN.findall(row.limits)
        targets = [(n, True) for n in named]
        if not targets:
            mapped = aten_name_for_api(row.api)
            if mapped is None or (check_names and _aten_exists(mapped) is False):
                stats.unmapped.append(row.api)
                continue
            targets = [(mapped, False)]
        for name, explicit in targets:
            prev = ops.get(name)
            if prev is not None and (prev[0] or not explicit):
                continue
            entry = _entry_for(row, where, date, mapped=not explicit)
            ops[name] = (explicit, _with_scope(entry, name))
    stats.entries = len(ops)
    snap = Snapshot(
        version=version,
        torch_neuronx_version=version,
        pre_release=False,
        description=f"TorchNeuron's published API compatibility table (torch-neuronx {version}): AWS's own "
        "classification of public APIs, mapped to ATen ops; ops it does not list are unknown.",
        ops={k: e for k, (_, e) in ops.items()},
        unlisted=None,
        sources=[
            {
                "id": "compat-table",
                "url" if "://" in source else "path": source,
                "date": date,
                "what": "torch_api_compatibility.md (Y / CPU_FALLBACK / N per public API)",
            }
        ],
    )
    return snap, stats


def _with_scope(entry: OpEntry, name: str) -> OpEntry:
    # A bare ATen name in the table (or a mapped API name) stands for every overload of that op.
    from dataclasses import replace

    return replace(entry, all_overloads="." not in name.split("::", 1)[1])


def guess_version(path: str | Path) -> str | None:
    """A torch-neuronx version stated in the table's text (`torch-neuronx 2.13.3`), if any."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")[:4000]
    m = re.search(r"torch-neuronx\s+v?(\d+\.\d+\.\d+[\w.+-]*)", text)
    return m.group(1).rstrip(".") if m else None


def import_compat_table(
    path: str | Path, *, version: str | None = None, source: str | None = None, date: str | None = None
) -> tuple[Snapshot, ImportStats]:
    """Parse the table file and build its snapshot; the version comes from `version` or the file's text."""
    rows = parse_table(path)
    version = version or guess_version(path)
    if not version:
        raise InputFileError(
            f"{path}: no torch-neuronx version stated in the file; pass --version (e.g. 2.13.3)"
        )
    if date is None:
        import datetime as _dt

        date = _dt.datetime.fromtimestamp(Path(path).stat().st_mtime, _dt.timezone.utc).date().isoformat()
    return build_snapshot(rows, version=version, source=source or Path(path).name, date=date)
