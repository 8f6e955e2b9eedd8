"""opdb probe: the pure aggregation, OpInfo selection, and an end-to-end run on the stand-in device (child
process) whose observed statuses must equal the statuses the stand-in was configured with."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from neuron_migrate.errors import OpdbError
from neuron_migrate.opdb import db
from neuron_migrate.opdb.probe import (
    Observation,
    ProbeOptions,
    ProbeRun,
    classify_tracked,
    combine,
    run_probe,
    select_opinfos,
)
from tests.support import OPDB_FIXTURES

CONFIG = OPDB_FIXTURES / "standin-config.json"
RUN = ProbeRun("stand-in", "2.13.0", "stand-in", False, "cfg", date="2026-12-02")


def test_combine_worst_observation_wins_and_mixed_dtypes_are_unknown():
    snap = combine(
        [
            Observation("aten::add.Tensor", "float32", "native"),
            Observation("aten::add.Tensor", "float32", "cpu_fallback", "fell back"),
            Observation("aten::add.Tensor", "float32", "native"),
            Observation("aten::add.Tensor", "bfloat16", "native"),
            Observation("aten::mm", "float32", "unsupported", "RuntimeError: boom"),
            Observation("aten::mm", "float32", "native"),
        ],
        RUN,
    )
    add = snap.entries()["aten::add.Tensor"]
    assert add.status == "unknown" and "varies by dtype" in add.note
    assert (add.dtypes["float32"].status, add.dtypes["float32"].note) == ("cpu_fallback", "fell back")
    assert add.dtypes["bfloat16"].status == "native"
    mm = snap.entries()["aten::mm"]
    assert mm.status == "unsupported" and mm.dtypes["float32"].note == "RuntimeError: boom"
    assert mm.source == "probe:stand-in:2026-12-02:torch 2.13.0"
    assert snap.lookup("aten::sub.Tensor").status == "unknown"  # not probed
    assert "proves the mechanism only" in snap.description


def test_failure_without_op_name_marks_the_base_name():
    snap = combine([Observation("aten::sin", "float32", "unsupported", "x", all_overloads=True)], RUN)
    assert snap.lookup("aten::sin.out", "float32").status == "unsupported"


def test_classify_tracked_fallback_wins():
    got = {(o.op, o.status) for o in classify_tracked({"aten::a", "aten::b"}, {"aten::b"}, "float32")}
    assert got == {("aten::a", "native"), ("aten::b", "cpu_fallback")}


def test_select_opinfos_by_name_aten_name_and_limit():
    infos = [
        SimpleNamespace(name="add", aten_name="add", variant_test_name=""),
        SimpleNamespace(name="nn.functional.relu", aten_name="relu", variant_test_name=""),
        SimpleNamespace(name="sin", aten_name="sin", variant_test_name=""),
    ]
    assert [o.name for o in select_opinfos(infos, ["aten::relu", "add"], None)] == [
        "add",
        "nn.functional.relu",
    ]
    assert len(select_opinfos(infos, [], 2)) == 2
    with pytest.raises(OpdbError, match="no OpInfo matches --ops nope"):
        select_opinfos(infos, ["nope"], None)


@pytest.fixture(scope="module")
def probed():
    pytest.importorskip("expecttest")
    opts = ProbeOptions(
        ops=("add", "sin", "cos", "atan", "nn.functional.relu"),
        dtypes=("float32", "float64"),
        samples=2,
        opdb=str(CONFIG),
        stand_in=True,
        version="probe-test",
    )
    return run_probe(opts, timeout=300)


def test_probe_on_stand_in_matches_its_configured_op_set(probed):
    config = db.load_snapshot_file(CONFIG)
    compared = 0
    for op, entry in probed.entries().items():
        for dtype, observed in entry.dtypes.items():
            expected = config.lookup(op, dtype).status
            assert observed.status == expected, (op, dtype, observed.note)
            compared += 1
    # Non-vacuous: every configured kind of answer was probed and seen.
    got = {(op, d): e.status for op, entry in probed.entries().items() for d, e in entry.dtypes.items()}
    assert got[("aten::add.Tensor", "float32")] == "native"
    assert got[("aten::add.Tensor", "float64")] == "cpu_fallback"  # per-dtype override
    assert got[("aten::sin", "float32")] == "unsupported" and got[("aten::sin", "float64")] == "native"
    assert got[("aten::cos", "float32")] == "cpu_fallback"
    # atan is unlisted -> the configured rule; the stand-in may dispatch it as atan or atan.out
    atan = {status for (op, d), status in got.items() if db.base_name(op) == "aten::atan" and d == "float64"}
    assert atan == {"cpu_fallback"}
    assert got[("aten::relu", "float32")] == "native"
    assert compared >= 10


def test_probe_snapshot_records_failure_text_and_provenance(probed):
    sin = probed.entries()["aten::sin"]
    assert sin.dtypes["float32"].note.startswith(
        "RuntimeError: fails on neuron: aten::sin (float32) is not supported"
    )
    assert sin.source.startswith("probe:stand-in:") and "torch 2." in sin.source
    assert probed.version == "probe-test" and probed.unlisted is None
