"""opdb.db: lookup order, name and dtype normalisation, (de)serialisation, errors, shipped snapshots, diff."""

from __future__ import annotations

import json

import pytest

from neuron_migrate.errors import OpdbError
from neuron_migrate.opdb import db
from neuron_migrate.opdb.db import DtypeEntry, OpEntry, Snapshot, Support

RULE = Support("cpu_fallback", None, "boxed-fallback", "rule", "src-rule", "2026-01-01")


def make(ops, unlisted=None, version="t1", pre_release=False):
    return Snapshot(
        version=version,
        torch_neuronx_version="x",
        pre_release=pre_release,
        description="d",
        ops=ops,
        unlisted=unlisted,
        sources=[{"id": "s", "path": "p", "date": "2026-01-01", "what": "w"}],
    )


@pytest.fixture
def snap():
    return make(
        {
            "aten::add.Tensor": OpEntry(
                "native",
                "Native",
                "python-mlir",
                "op note",
                "src-add",
                "2026-01-02",
                {
                    "float64": DtypeEntry("native", "computed in float32"),
                    "complex64": DtypeEntry("unsupported", "no complex"),
                },
            ),
            "aten::linalg_qr": OpEntry(
                "cpu_fallback", None, "", "qr note", "src-qr", "2026-01-03", all_overloads=True
            ),
            "aten::relu": OpEntry("native", "Native", "cpp", "", "src-relu", "2026-01-04"),
        }
    )


def test_dtype_override_wins_and_keeps_op_provenance(snap):
    s = snap.lookup("aten::add.Tensor", "float64")
    assert (s.status, s.note, s.source, s.route) == (
        "native",
        "computed in float32",
        "src-add",
        "python-mlir",
    )
    assert snap.lookup("aten::add.Tensor", "complex64").status == "unsupported"
    assert snap.lookup("aten::add.Tensor", "float32").note == "op note"  # no override: the op entry


def test_base_entry_matches_all_overloads_only_when_marked(snap):
    assert snap.lookup("aten::linalg_qr.out").source == "src-qr"
    # aten::relu is the default overload, not a base name: relu.out is not covered by it
    assert snap.lookup("aten::relu.out").status == "unknown"
    assert snap.lookup("aten::relu").source == "src-relu"


def test_unlisted_rule_only_for_ops_not_listed(snap):
    ruled = make(snap.entries(), unlisted=RULE)
    assert ruled.lookup("aten::atan") == RULE
    assert ruled.lookup("aten::add.Tensor").status == "native"


def test_no_source_means_unknown_never_a_guess(snap):
    s = snap.lookup("aten::atan", "float32")
    assert s.status == "unknown" and s.source == "" and "t1" in s.note


@pytest.mark.parametrize("spelling", ["aten::add.Tensor", "aten.add.Tensor", " aten::add.Tensor "])
def test_op_spellings(snap, spelling):
    assert snap.lookup(spelling).source == "src-add"


def test_default_overload_spelling(snap):
    assert snap.lookup("aten.relu.default").source == "src-relu"


@pytest.mark.parametrize("dtype", ["float64", "torch.float64", "double", "fp64"])
def test_dtype_spellings(snap, dtype):
    assert snap.lookup("aten::add.Tensor", dtype).note == "computed in float32"


def test_torch_dtype_objects():
    torch = pytest.importorskip("torch")
    assert db.normalize_dtype(torch.bfloat16) == "bfloat16"


def test_lookup_is_cached(snap):
    assert snap.lookup("aten::add.Tensor", "float64") is snap.lookup("aten::add.Tensor", "float64")


def test_round_trip_is_stable_and_sorted(snap, tmp_path):
    text = db.dump_snapshot(make(snap.entries(), unlisted=RULE), tmp_path / "a.json")
    again = db.load_snapshot_file(tmp_path / "a.json")
    assert db.dump_snapshot(again) == text
    data = json.loads(text)
    assert next(iter(data)) == "schema" and list(data["ops"]) == sorted(data["ops"])
    assert again.lookup("aten::linalg_qr.out").status == "cpu_fallback"
    assert again.lookup("aten::atan") == RULE


@pytest.mark.parametrize(
    "content, words",
    [
        ("{not json", "not valid JSON"),
        ('{"schema": "other/1"}', "not an opdb snapshot"),
        ('{"schema": "neuron-migrate/opdb/1", "version": "v"}', "torch_neuronx_version"),
    ],
)
def test_malformed_files_are_one_line_errors(tmp_path, content, words):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(OpdbError) as err:
        db.load_snapshot_file(path)
    assert words in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_bad_status_names_the_op(tmp_path, snap):
    data = db.snapshot_to_dict(snap)
    data["ops"]["aten::relu"]["status"] = "works"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(OpdbError, match=r"aten::relu.*'works'"):
        db.load_snapshot(str(path))


def test_unknown_version_lists_available():
    with pytest.raises(OpdbError, match=r"unknown opdb version '0\.0\.1'.*2\.13\.3-prerelease-2026-04-21"):
        db.load_snapshot("0.0.1")


def test_version_order_release_after_its_prerelease(monkeypatch, tmp_path):
    for name in ("2.14.0", "2.13.3", "2.13.3-prerelease-2026-04-21", "2.9.1"):
        (tmp_path / f"{name}.json").write_text("{}")
    monkeypatch.setattr(db, "_data_dir", lambda: tmp_path)
    assert db.available_versions() == ["2.9.1", "2.13.3-prerelease-2026-04-21", "2.13.3", "2.14.0"]


def test_shipped_snapshot_is_the_prerelease_one():
    snap = db.load_snapshot()
    assert snap.version == "2.13.3-prerelease-2026-04-21" == db.available_versions()[-1]
    assert snap.pre_release and "PRE-RELEASE" in snap.description
    assert snap.unlisted is not None and snap.unlisted.route == "boxed-fallback"
    assert "NeuronBindings.cpp" in snap.unlisted.source
    for op, entry in snap.entries().items():
        assert entry.source.startswith("https://github.com/parmoham-aws/test-repo-parmoham/blob/98154b86"), op
        assert entry.date == "2026-04-21", op
    path = db._data_dir() / f"{snap.version}.json"
    assert path.stat().st_size < 1_000_000


def test_diff_reports_changed_added_removed(snap):
    newer = dict(snap.entries())
    newer["aten::add.Tensor"] = OpEntry(
        "native", "Native", "", "", "s2", "2026-02-01", {"complex64": DtypeEntry("native", "now mapped")}
    )
    newer["aten::relu"] = OpEntry(
        "cpu_fallback", None, "cpp", "", "s2", "2026-02-01", {"float64": DtypeEntry("native", "")}
    )  # float64 only stated in B: no row
    del newer["aten::linalg_qr"]
    newer["aten::linalg_qr.out"] = OpEntry("native", "Native", "", "", "s2", "2026-02-01")
    newer["aten::atan"] = OpEntry("native", None, "", "", "s2", "2026-02-01")
    changes = {c.op: c for c in db.diff_snapshots(snap, make(newer, version="t2"))}
    assert "complex64: unsupported -> native" in changes["aten::add.Tensor"].detail
    assert (changes["aten::relu"].kind, changes["aten::relu"].after, changes["aten::relu"].detail) == (
        "changed",
        "cpu_fallback",
        "",
    )
    assert (changes["aten::linalg_qr"].kind, changes["aten::linalg_qr"].after) == ("removed", "unknown")
    assert (changes["aten::linalg_qr.out"].kind, changes["aten::linalg_qr.out"].before) == (
        "added",
        "cpu_fallback",
    )
    assert (changes["aten::atan"].kind, changes["aten::atan"].before) == ("added", "unknown")
    assert db.diff_snapshots(snap, snap) == []
