"""The operator database: versioned snapshots of what torch-neuronx does with each ATen overload and dtype.

A snapshot is one JSON file per torch-neuronx release in `neuron_migrate/opdb/data/` (schema
`neuron-migrate/opdb/1`). `Snapshot.lookup` answers "what happens to `aten::X.overload` with dtype D" and
never guesses: what no source establishes is `unknown`. See docs/opdb.md for the format and what each source
is worth.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from neuron_migrate.errors import OpdbError
from neuron_migrate.model import STATUSES, Status

OPDB_SCHEMA = "neuron-migrate/opdb/1"
KLASSES: tuple[str, ...] = ("Native", "Host-only", "Needs a process group")

# Spellings torch users and tools print for the same dtype; keys of a snapshot use the right-hand names.
_DTYPE_ALIASES = {
    "float": "float32",
    "fp32": "float32",
    "f32": "float32",
    "double": "float64",
    "fp64": "float64",
    "f64": "float64",
    "half": "float16",
    "fp16": "float16",
    "f16": "float16",
    "bf16": "bfloat16",
    "long": "int64",
    "i64": "int64",
    "int": "int32",
    "i32": "int32",
    "short": "int16",
    "cfloat": "complex64",
    "cdouble": "complex128",
    "chalf": "complex32",
}


@dataclass(frozen=True)
class Support:
    """The answer of a lookup: status, TorchNeuron's class, how it is implemented, a note and provenance."""

    status: Status
    klass: str | None
    route: str
    note: str
    source: str
    date: str


@dataclass(frozen=True)
class DtypeEntry:
    """A per-dtype override of an op entry; empty `source`/`date` mean "same as the op entry"."""

    status: Status
    note: str = ""
    source: str = ""
    date: str = ""


@dataclass(frozen=True)
class OpEntry:
    """What one source says about one overload (or, with `all_overloads`, every overload of a base name)."""

    status: Status
    klass: str | None = None
    route: str = ""
    note: str = ""
    source: str = ""
    date: str = ""
    dtypes: dict[str, DtypeEntry] = field(default_factory=dict)
    all_overloads: bool = False


def normalize_op(op: str) -> str:
    """`aten.add.Tensor`, `aten::add.Tensor`, `aten.relu.default`, `aten::relu` -> canonical
    `ns::name[.overload]`."""
    op = op.strip()
    if "::" not in op and "." in op:
        ns, _, rest = op.partition(".")
        op = f"{ns}::{rest}"
    op = op.removesuffix(".default")
    return op


def base_name(op: str) -> str:
    """`aten::add.Tensor` -> `aten::add` (the overload packet)."""
    ns, sep, rest = op.partition("::")
    return f"{ns}{sep}{rest.split('.', 1)[0]}" if sep else op.split(".", 1)[0]


def normalize_dtype(dtype: Any) -> str:
    """`torch.float32`, `float32`, `fp32`, `half` -> the name torch prints without the `torch.` prefix."""
    name = str(dtype).strip().lower().removeprefix("torch.")
    return _DTYPE_ALIASES.get(name, name)


class Snapshot:
    """One torch-neuronx release's op support table, with the rule for ops it does not list."""

    def __init__(
        self,
        *,
        version: str,
        torch_neuronx_version: str,
        pre_release: bool,
        description: str,
        ops: dict[str, OpEntry],
        unlisted: Support | None = None,
        sources: list[dict[str, str]] | None = None,
        origin: str = "",
    ) -> None:
        self.version = version
        self.torch_neuronx_version = torch_neuronx_version
        self.pre_release = pre_release
        self.description = description
        self.unlisted = unlisted
        self.sources = list(sources or [])
        self.origin = origin
        self._ops = dict(ops)
        self._cache: dict[tuple[str, str | None], Support] = {}

    def __repr__(self) -> str:
        return f"Snapshot({self.version!r}, {len(self._ops)} ops)"

    def entries(self) -> dict[str, OpEntry]:
        """All entries, op key -> entry, sorted by key (a copy; the snapshot stays immutable)."""
        return dict(sorted(self._ops.items()))

    def entry(self, op: str) -> OpEntry | None:
        """The entry stored under exactly this (normalised) key, if any."""
        return self._ops.get(normalize_op(op))

    def lookup(self, op: str, dtype: Any = None) -> Support:
        """Support for an overload and optional dtype: per-dtype override, op entry, base-name entry, the
        snapshot's rule for unlisted ops, else `unknown`. Cached per (op, dtype): a trace calls this per
        op."""
        key = (op, None if dtype is None else str(dtype))
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._lookup(
                normalize_op(op), None if dtype is None else normalize_dtype(dtype)
            )
        return hit

    def _lookup(self, op: str, dtype: str | None) -> Support:
        entry = self._ops.get(op)
        if entry is None:
            base = self._ops.get(base_name(op))
            entry = base if base is not None and base.all_overloads else None
        if entry is not None:
            return _support_of(entry, dtype)
        if self.unlisted is not None:
            return self.unlisted
        return Support(
            "unknown", None, "", f"not in opdb {self.version}; no source establishes its status", "", ""
        )


def _support_of(entry: OpEntry, dtype: str | None) -> Support:
    over = entry.dtypes.get(dtype) if dtype is not None else None
    if over is None:
        return Support(entry.status, entry.klass, entry.route, entry.note, entry.source, entry.date)
    return Support(
        over.status,
        entry.klass,
        entry.route,
        over.note or entry.note,
        over.source or entry.source,
        over.date or entry.date,
    )


# ---------------------------------------------------------------------------------------------------------
# JSON (de)serialisation: stable, sorted, so a regenerated snapshot diffs cleanly.


def snapshot_to_dict(snap: Snapshot) -> dict[str, Any]:
    """The JSON document of a snapshot, keys in a fixed order and ops sorted."""
    unlisted = None
    if snap.unlisted is not None:
        u = snap.unlisted
        unlisted = {
            "status": u.status,
            "klass": u.klass,
            "route": u.route,
            "note": u.note,
            "source": u.source,
            "date": u.date,
        }
    ops: dict[str, Any] = {}
    for name, e in snap.entries().items():
        item: dict[str, Any] = {
            "status": e.status,
            "klass": e.klass,
            "route": e.route,
            "note": e.note,
            "source": e.source,
            "date": e.date,
        }
        if e.all_overloads:
            item["all_overloads"] = True
        item["dtypes"] = {d: _dtype_dict(de) for d, de in sorted(e.dtypes.items())}
        ops[name] = item
    return {
        "schema": OPDB_SCHEMA,
        "version": snap.version,
        "torch_neuronx_version": snap.torch_neuronx_version,
        "pre_release": snap.pre_release,
        "description": snap.description,
        "sources": snap.sources,
        "unlisted": unlisted,
        "ops": ops,
    }


def _dtype_dict(de: DtypeEntry) -> dict[str, str]:
    out = {"status": de.status, "note": de.note}
    if de.source:
        out["source"] = de.source
    if de.date:
        out["date"] = de.date
    return out


def dump_snapshot(snap: Snapshot, path: str | Path | None = None) -> str:
    """Serialise a snapshot (one-space indent, sorted ops, trailing newline); write it to `path` if given."""
    text = json.dumps(snapshot_to_dict(snap), indent=1, ensure_ascii=False) + "\n"
    if path is not None:
        out = Path(path)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
        except OSError as err:
            raise OpdbError(
                f"{out}: cannot write the snapshot ({err.strerror}); choose another --out"
            ) from None
    return text


def snapshot_from_dict(data: Any, where: str) -> Snapshot:
    """Build a snapshot from its JSON document; any malformation is one OpdbError line naming `where`."""
    if not isinstance(data, dict) or data.get("schema") != OPDB_SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise OpdbError(f"{where}: not an opdb snapshot (schema {got!r}, expected {OPDB_SCHEMA!r})")
    for key, kind in (("version", str), ("torch_neuronx_version", str), ("pre_release", bool), ("ops", dict)):
        if not isinstance(data.get(key), kind):
            raise OpdbError(
                f"{where}: field {key!r} missing or not a {kind.__name__}; regenerate the snapshot"
            )
    ops = {
        normalize_op(name): _entry_from(item, f"{where}: op {name!r}") for name, item in data["ops"].items()
    }
    unlisted = data.get("unlisted")
    rule = None
    if unlisted is not None:
        u = _entry_from(unlisted, f"{where}: 'unlisted'")
        rule = Support(u.status, u.klass, u.route, u.note, u.source, u.date)
    return Snapshot(
        version=data["version"],
        torch_neuronx_version=data["torch_neuronx_version"],
        pre_release=data["pre_release"],
        description=str(data.get("description", "")),
        ops=ops,
        unlisted=rule,
        sources=list(data.get("sources") or []),
        origin=where,
    )


def _entry_from(item: Any, where: str) -> OpEntry:
    if not isinstance(item, dict):
        raise OpdbError(f"{where}: expected an object, got {type(item).__name__}")
    status = item.get("status")
    if status not in STATUSES:
        raise OpdbError(f"{where}: status {status!r} is not one of {', '.join(STATUSES)}")
    klass = item.get("klass")
    if klass is not None and klass not in KLASSES:
        raise OpdbError(f"{where}: klass {klass!r} is not one of {', '.join(KLASSES)} or null")
    dtypes: dict[str, DtypeEntry] = {}
    for dt, d in (item.get("dtypes") or {}).items():
        if not isinstance(d, dict) or d.get("status") not in STATUSES:
            raise OpdbError(f"{where}: dtype {dt!r} needs a status from {', '.join(STATUSES)}")
        dtypes[normalize_dtype(dt)] = DtypeEntry(
            d["status"], str(d.get("note", "")), str(d.get("source", "")), str(d.get("date", ""))
        )
    return OpEntry(
        status,
        klass,
        str(item.get("route", "")),
        str(item.get("note", "")),
        str(item.get("source", "")),
        str(item.get("date", "")),
        dtypes,
        bool(item.get("all_overloads")),
    )


# ---------------------------------------------------------------------------------------------------------
# Shipped snapshots.


def _data_dir() -> Path:
    return Path(str(resources.files("neuron_migrate.opdb") / "data"))


def _version_key(version: str) -> tuple:
    # Newest = highest release number; a pre-release of X sorts before X itself; then by the rest of the name.
    m = re.match(r"(\d+(?:\.\d+)*)", version)
    nums = tuple(int(p) for p in m.group(1).split(".")) if m else ()
    return (nums, "prerelease" not in version, version)


def available_versions() -> list[str]:
    """Versions of the snapshots shipped with neuron-migrate, oldest first."""
    folder = _data_dir()
    names = [p.stem for p in folder.glob("*.json")] if folder.is_dir() else []
    return sorted(names, key=_version_key)


def load_snapshot_file(path: str | Path) -> Snapshot:
    """Load a snapshot from a JSON file (a shipped one or one written by an importer or the probe)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise OpdbError(f"{p}: cannot read the opdb snapshot ({err.strerror}); check the path") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise OpdbError(
            f"{p}: not valid JSON ({err.msg} at line {err.lineno}); regenerate the snapshot"
        ) from None
    return snapshot_from_dict(data, str(p))


def load_snapshot(version: str | None = None) -> Snapshot:
    """A shipped snapshot by version (None = the newest), or a snapshot file when given a path to a .json."""
    if version is not None and (version.endswith(".json") or "/" in version or "\\" in version):
        return load_snapshot_file(version)
    return _load_shipped(version)


@lru_cache(maxsize=8)
def _load_shipped(version: str | None) -> Snapshot:
    versions = available_versions()
    if not versions:
        raise OpdbError("no opdb snapshot is shipped in neuron_migrate/opdb/data; reinstall neuron-migrate")
    if version is None:
        version = versions[-1]
    if version not in versions:
        raise OpdbError(
            f"unknown opdb version {version!r}; available: {', '.join(versions)} "
            "(or pass a path to a snapshot .json)"
        )
    return load_snapshot_file(_data_dir() / f"{version}.json")


# ---------------------------------------------------------------------------------------------------------
# Comparing snapshots.


@dataclass(frozen=True)
class OpChange:
    """One difference between two snapshots: `kind` is changed | added | removed; statuses as `lookup` gives
    them in each snapshot (so an op only in B shows what A's unlisted rule, or `unknown`, said)."""

    op: str
    kind: str
    before: str
    after: str
    detail: str = ""


def diff_snapshots(a: Snapshot, b: Snapshot) -> list[OpChange]:
    """Ops whose op-level status, or the status of a dtype both list, differs from A to B; ops added or
    removed."""
    ea, eb = a.entries(), b.entries()
    changes = []
    for op in sorted(ea.keys() | eb.keys()):
        kind = "changed" if op in ea and op in eb else ("added" if op in eb else "removed")
        # Per-dtype rows only where both snapshots state the dtype (or one has no entry at all): a snapshot
        # that lists a dtype the other does not mention would otherwise be compared with the other's op-level
        # answer, which for a probe is a summary of other dtypes, not an observation.
        da, db_ = set(ea[op].dtypes if op in ea else ()), set(eb[op].dtypes if op in eb else ())
        dtypes = sorted(da & db_ if kind == "changed" else da | db_)
        moved = [
            f"{d}: {a.lookup(op, d).status} -> {b.lookup(op, d).status}"
            for d in dtypes
            if a.lookup(op, d).status != b.lookup(op, d).status
        ]
        before, after = a.lookup(op).status, b.lookup(op).status
        if kind == "changed" and before == after and not moved:
            continue
        changes.append(OpChange(op, kind, before, after, "; ".join(moved)))
    return changes


def list_json(snap: Snapshot, rows: list[dict[str, Any]], dtype: str | None, status: str | None) -> str:
    """`opdb list --format json`: the listed ops with their status, and the filters that chose them."""
    doc = {
        "schema": "neuron-migrate/opdb-list/1",
        "version": snap.version,
        "pre_release": snap.pre_release,
        "dtype": dtype,
        "status": status,
        "ops": rows,
    }
    return json.dumps(doc, indent=2)


def diff_json(a: Snapshot, b: Snapshot, changes: list[OpChange]) -> str:
    """`opdb diff --format json`: the ops whose status changed from snapshot `a` to `b`."""
    return json.dumps(
        {
            "schema": "neuron-migrate/opdb-diff/1",
            "a": a.version,
            "b": b.version,
            "changes": [c.__dict__ for c in changes],
        },
        indent=2,
    )
