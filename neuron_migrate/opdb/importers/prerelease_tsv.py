"""Build the first opdb snapshot from `../shared/data/torchneuron-prerelease-ops.tsv`.

The TSV lists what a pre-release torch-neuronx source tree (HEAD 98154b86, 2026-04-21) registers for the
`neuron` device; its README (torchneuron-prerelease-ops.md) says how to read it. Rules applied here, each from
that README:

- only effective rows count (`dtype_notes` not starting with `[`);
- an effective `native` row (cpp, python-mlir/-nki/-xla/-host-copy, structured-delegate) makes the op native,
  except a C++ kernel whose note says it computes on CPU (argsort.stable, select_backward): cpu_fallback;
- `collective` rows are native with TorchNeuron's class "Needs a process group";
- `decomposed` rows act in torch.compile and the eager MLIR lowering, not in eager dispatch, and
  `autocast_only` rows only wrap a dtype policy: both add a note and never make an op native. An op with only
  such rows gets the snapshot's rule for unlisted ops (the boxed CPU fallback), like an op not in the table;
- clear dtype facts become per-dtype entries (f64/i64 downcasts; "complex unsupported" on the active route).

One fact of the source is out of date for the release it predates: the source maps no complex dtypes, but
the Neuron 2.33 docs (torch-neuronx 2.13.3 / 2.14.3) decompose complex operations before lowering by default
on PyTorch >= 2.13 (`TORCH_NEURONX_COMPLEX_DECOMPOSE`). So where the source says "complex unsupported",
complex dtypes are `unknown` with both facts and the docs as their source, never `unsupported`: the release
no longer rejects them, and nothing says which run natively.
"""

from __future__ import annotations

import csv
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from neuron_migrate.errors import InputFileError
from neuron_migrate.opdb.db import DtypeEntry, OpEntry, Snapshot, Support

COMMIT = "98154b867aa24562a3213e520d9ad7fd41032291"
BLOB = f"https://github.com/parmoham-aws/test-repo-parmoham/blob/{COMMIT}/"
DATE = "2026-04-21"
VERSION = "2.13.3-prerelease-2026-04-21"
TORCH_NEURONX_VERSION = "pre-release dev snapshot (source HEAD 98154b86, 2026-04-21), predates 2.13.3"
# Relative to the repo checkout (the data is not shipped with the package).
DEFAULT_TSV = (
    Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "torchneuron-prerelease-ops.tsv"
).resolve()
HEADER = ["op", "status", "route", "dtype_notes", "evidence"]
NATIVE_ROUTES = {"cpp", "python-mlir", "python-nki", "python-xla", "python-host-copy", "structured-delegate"}
COMPLEX = ("complex64", "complex128")
COMPLEX_DOCS = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/env-vars.html"
COMPLEX_DOCS_DATE = "2026-10-14"
DESCRIPTION = (
    "PRE-RELEASE state: op registrations read from a torch-neuronx development source tree (HEAD 98154b86, "
    "2026-04-21, package 0.1.0, BUILD_TYPE DEV), about six months before the Neuron 2.33 public beta. "
    "'native' means a PrivateUse1 kernel was registered and effective at that commit, not that it was run; "
    "verify on a real install (`neuron-migrate opdb import registrations`, `opdb probe`) before relying on "
    "it."
)
UNLISTED = Support(
    "cpu_fallback",
    None,
    "boxed-fallback",
    "not registered for neuron: the boxed PrivateUse1 fallback neuron_cpu_fallback copies the inputs to CPU, "
    "runs the CPU kernel and copies back; an overload with a core composite kernel runs that kernel first "
    "and its callees decide (a trace only sees post-decomposition ops)",
    BLOB + "torch_neuronx/csrc/core/NeuronBindings.cpp",
    DATE,
)
_DOWNCAST = re.compile(r"f64->f32,\s*i64->i32 (?:input )?downcast(?:, outputs recast)?")
_XLA_CAST = re.compile(r"f64->f32 pre-cast; JAX type map i64->i32")
_XFAIL = re.compile(r"upstream xfail: (.*)")


@dataclass(frozen=True)
class Row:
    """One TSV row; `line` is its 1-based line number in the file (for error messages)."""

    op: str
    status: str
    route: str
    notes: str
    evidence: str
    line: int

    @property
    def effective(self) -> bool:
        """The README's rule: a row takes effect at HEAD iff its notes do not start with a bracketed tag."""
        return not self.notes.startswith("[")


def read_rows(path: str | Path) -> list[Row]:
    """Read the TSV, checking its header; a malformed file is one InputFileError line naming file and line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise InputFileError(
            f"{p}: cannot read the pre-release op table ({err.strerror}); pass its path"
        ) from None
    records = list(csv.reader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE))
    if not records or records[0] != HEADER:
        raise InputFileError(
            f"{p}:1: header is not {' | '.join(HEADER)}; is this torchneuron-prerelease-ops.tsv?"
        )
    rows = []
    for n, rec in enumerate(records[1:], start=2):
        if not rec:
            continue
        if len(rec) != len(HEADER):
            raise InputFileError(f"{p}:{n}: expected {len(HEADER)} tab-separated columns, got {len(rec)}")
        rows.append(Row(*rec, line=n))
    return rows


def evidence_url(evidence: str) -> str:
    """`torch_neuronx/x.py:12` -> the GitHub blob URL at the snapshot commit, with `#L12`."""
    path, _, line = evidence.rpartition(":")
    return f"{BLOB}{path}#L{line}" if line.isdigit() else BLOB + evidence


def _xfail_hint(text: str) -> str:
    # Upstream xfail lists can run to hundreds of characters; keep the count and the dtypes they name.
    tests = [t.strip() for t in text.split(";") if t.strip()]
    dtypes = sorted({d for t in tests for d in re.findall(r"\[([^\]]*)\]", t) for d in d.split(",") if d})
    tail = f" [{', '.join(dtypes)}]" if dtypes else ""
    return f"upstream xfail (hint): {len(tests)} test{'s' if len(tests) > 1 else ''}{tail}"


def _clean_note(notes: str) -> str:
    """The row's notes minus what becomes per-dtype entries, with xfail lists summarised."""
    m = _XFAIL.search(notes)
    head = notes[: m.start()] if m else notes
    head = _XLA_CAST.sub("", _DOWNCAST.sub("", head))
    head = head.replace("; complex unsupported", "").replace("complex unsupported", "")
    parts = [p.strip(" ;,") for p in head.split(";")]
    parts = [p for p in parts if p]
    if m:
        parts.append(_xfail_hint(m.group(1)))
    return "; ".join(parts)


def _dtype_facts(row: Row) -> dict[str, DtypeEntry]:
    """Per-dtype entries for the clear dtype facts in a native row's notes."""
    facts: dict[str, DtypeEntry] = {}
    if _DOWNCAST.search(row.notes) or _XLA_CAST.search(row.notes):
        facts["float64"] = DtypeEntry("native", "computed in float32 (downcast), output recast to float64")
        facts["int64"] = DtypeEntry("native", "computed in int32 (downcast), output recast to int64")
    if any(
        w in row.notes for w in ("complex unsupported", "complex rejected", "complex dtypes are not mapped")
    ):
        note = (
            f"{row.route} maps no complex dtypes in the pre-release source; the 2.33 release decomposes "
            "complex ops before lowering by default on PyTorch >= 2.13 (TORCH_NEURONX_COMPLEX_DECOMPOSE): "
            "whether this op then runs on the device is not established (probe it)"
        )
        for dt in COMPLEX:
            facts[dt] = DtypeEntry("unknown", note, COMPLEX_DOCS, COMPLEX_DOCS_DATE)
    return facts


def _merge_dtypes(native_rows: list[Row]) -> dict[str, DtypeEntry]:
    # A complex dtype is in question only if every native route of the op maps none; a downcast note from any
    # route holds.
    per_row = [_dtype_facts(r) for r in native_rows]
    merged: dict[str, DtypeEntry] = {}
    for facts in per_row:
        for dt, entry in facts.items():
            if dt in COMPLEX and not all(dt in f and f[dt].status == entry.status for f in per_row):
                continue
            merged.setdefault(dt, entry)
    return merged


def _side_note(row: Row) -> str:
    where = f"{row.evidence}"
    if row.status == "decomposed":
        scope = (
            "torch.compile only" if "compile-only" in row.notes else "torch.compile and eager MLIR lowering"
        )
        kind = "dispatch stub" if row.route == "cpp-dispatch-stub" else "decomposition"
        return f"Neuron {kind} ({scope}, not eager dispatch) at {where}"
    policy = re.search(r"policy ([a-z0-9_]+): ([^;]*)", row.notes)
    compute = re.search(r"compute: (.*)", row.notes)
    text = f"autocast policy {policy.group(1)} ({policy.group(2).strip()})" if policy else "autocast wrapper"
    if compute and "active PrivateUse1 kernel" not in compute.group(1):
        text += f"; without own kernel: {compute.group(1).strip()}"
    return f"{text} at {where}"


def _entry_for(rows: list[Row], delegates: dict[str, OpEntry]) -> OpEntry:
    native = [r for r in rows if r.status in ("native", "collective")]
    side = "; ".join(_side_note(r) for r in rows if r.status in ("decomposed", "autocast_only"))
    if not native:
        note = "; ".join(
            p for p in ("no eager kernel for neuron: boxed CPU fallback (see 'unlisted')", side) if p
        )
        # The status is the unlisted rule's; the provenance is the row that put the op in the table.
        return OpEntry(UNLISTED.status, None, UNLISTED.route, note, evidence_url(rows[0].evidence), DATE)
    first = native[0]
    routes = list(dict.fromkeys(r.route for r in native))
    notes = list(
        dict.fromkeys(
            f"{r.route}: {n}" if len(routes) > 1 else n for r in native if (n := _clean_note(r.notes))
        )
    )
    dtypes = _merge_dtypes(native)
    target = re.search(r"calls (\S+) \(", first.notes) if first.route == "structured-delegate" else None
    if target and target.group(1) in delegates:
        dtypes = dict(delegates[target.group(1)].dtypes)
    status, klass = "native", "Native"
    if first.status == "collective":
        klass = "Needs a process group"
    elif all("computed on CPU" in r.notes for r in native):
        status, klass = "cpu_fallback", None  # a registered C++ kernel that itself copies to CPU and back
    note = "; ".join(p for p in ("; ".join(notes), side) if p)
    return OpEntry(status, klass, "+".join(routes), note, evidence_url(first.evidence), DATE, dtypes)


def build_snapshot(rows: list[Row], source_name: str = "torchneuron-prerelease-ops.tsv") -> Snapshot:
    """The pre-release snapshot: one entry per op with an effective row, plus the unlisted-ops rule."""
    by_op: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        if row.effective:
            by_op[row.op].append(row)
    ops: dict[str, OpEntry] = {}
    # Structured delegates inherit the dtype facts of the out= kernel they call, so build those first.
    for op in sorted(by_op, key=lambda o: any(r.route == "structured-delegate" for r in by_op[o])):
        ops[op] = _entry_for(by_op[op], ops)
    sources = [
        {
            "id": "prerelease-tsv",
            "path": f"shared/data/{source_name}",
            "date": DATE,
            "what": "registrations read from the pre-release torch-neuronx source tree (see its README)",
        },
        {
            "id": "prerelease-source",
            "url": BLOB.rstrip("/"),
            "date": DATE,
            "what": "torch-neuronx development source, HEAD 98154b86; every entry's source points into it "
            "(complex dtypes excepted)",
        },
        {
            "id": "release-docs-complex",
            "url": COMPLEX_DOCS,
            "date": COMPLEX_DOCS_DATE,
            "what": "Neuron 2.33 environment variables: TORCH_NEURONX_COMPLEX_DECOMPOSE, on by default for "
            "PyTorch >= 2.13, decomposes complex ops; it makes the source's complex dtypes unknown, not "
            "unsupported",
        },
    ]
    return Snapshot(
        version=VERSION,
        torch_neuronx_version=TORCH_NEURONX_VERSION,
        pre_release=True,
        description=DESCRIPTION,
        ops=ops,
        unlisted=UNLISTED,
        sources=sources,
    )


def import_tsv(path: str | Path | None = None) -> Snapshot:
    """Read the TSV (default: ../shared/data/ next to the repo) and build the snapshot."""
    p = Path(path) if path is not None else DEFAULT_TSV
    return build_snapshot(read_rows(p), p.name)


def main(argv: list[str] | None = None) -> int:
    """`build_prerelease_snapshot.py [TSV] [--out PATH]`: write the snapshot, print a one-line summary."""
    import argparse

    from neuron_migrate.errors import NeuronMigrateError
    from neuron_migrate.opdb.db import dump_snapshot

    parser = argparse.ArgumentParser(description="Build the pre-release opdb snapshot from the TSV.")
    parser.add_argument("tsv", nargs="?", default=str(DEFAULT_TSV), help="torchneuron-prerelease-ops.tsv")
    parser.add_argument("--out", default=None, help="output JSON (default: the shipped data/<version>.json)")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else Path(__file__).resolve().parents[1] / "data" / f"{VERSION}.json"
    try:
        snap = import_tsv(args.tsv)
        text = dump_snapshot(snap, out)
    except NeuronMigrateError as err:
        print(f"build_prerelease_snapshot: error: {err}", file=sys.stderr)
        return 2
    counts: dict[str, int] = defaultdict(int)
    for entry in snap.entries().values():
        counts[entry.status] += 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(f"wrote {out} ({len(text.encode()) // 1024} KiB, {len(snap.entries())} ops: {summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
