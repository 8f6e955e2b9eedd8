"""Importers: the pre-release TSV, TorchNeuron's compatibility table, and dispatcher registrations."""

from __future__ import annotations

import json

import pytest

from neuron_migrate.errors import InputFileError
from neuron_migrate.opdb import db
from neuron_migrate.opdb.importers import compat_table, prerelease_tsv, registrations
from tests.support import OPDB_FIXTURES

FIXTURES = OPDB_FIXTURES
EXCERPT = FIXTURES / "prerelease-excerpt.tsv"
COMPAT = FIXTURES / "torch_api_compatibility.md"


@pytest.fixture(scope="module")
def pre():
    return prerelease_tsv.import_tsv(EXCERPT)


# --- pre-release TSV ----------------------------------------------------------------------------------------


def test_only_effective_rows_count(pre):
    ops = pre.entries()
    assert "aten::eq" not in ops  # its only row is [inert]
    assert "aten::linalg_qr" not in ops  # cpu_fallback_explicit rows are all [inactive]
    assert ops["aten::add.Tensor"].route == "python-mlir"  # the [inactive] xla and legacy rows are ignored
    assert ops["aten::mul.Tensor"].route == "python-xla"  # the [shadowed] mlir row is ignored


def test_decomposition_or_autocast_alone_never_makes_native(pre):
    for op in ("aten::__rshift__.Scalar", "aten::acos", "aten::binary_cross_entropy"):
        entry = pre.entries()[op]
        assert (entry.status, entry.route) == ("cpu_fallback", "boxed-fallback"), op
    assert "decomposition" in pre.entries()["aten::__rshift__.Scalar"].note
    assert "autocast policy fp32" in pre.entries()["aten::acos"].note
    assert "autocast policy banned" in pre.entries()["aten::binary_cross_entropy"].note


def test_native_keeps_side_notes(pre):
    entry = pre.entries()["aten::lerp.Scalar"]
    assert (
        entry.status == "native" and "decomposition" in entry.note and "upstream xfail (hint)" in entry.note
    )


def test_collective_is_native_needing_a_process_group(pre):
    entry = pre.entries()["c10d::allreduce_"]
    assert (entry.status, entry.klass) == ("native", "Needs a process group")


def test_downcast_becomes_dtype_entries(pre):
    s = pre.lookup("aten::add.Tensor", "float64")
    assert s.status == "native" and "float32" in s.note and "downcast" in s.note
    assert "int32" in pre.lookup("aten::add.Tensor", "int64").note


def test_complex_unknown_only_where_the_active_routes_say_so(pre):
    # xla maps no complex dtypes in the source, but the release decomposes complex ops: unknown, with the docs
    mul = pre.lookup("aten::mul.Tensor", "complex64")
    assert mul.status == "unknown" and "TORCH_NEURONX_COMPLEX_DECOMPOSE" in mul.note
    assert mul.source.endswith("/torch/reference/env-vars.html") and mul.date == "2026-10-14"
    assert pre.lookup("aten::add.Tensor", "complex64").status == "native"  # mlir row says nothing: op level
    assert pre.lookup("aten::contiguous", "complex64").status == "native"  # mlir rejects, host-copy takes any


def test_multi_route_and_nki_dtype_limits_stay_notes(pre):
    entry = pre.entries()["aten::gather"]
    assert entry.route == "python-nki+python-mlir" and "fp32/bf16/fp16" in entry.note
    assert pre.lookup("aten::gather", "int32").status == "native"


def test_structured_delegate_inherits_dtype_facts(pre):
    entry = pre.entries()["aten::eq.Tensor"]
    assert entry.status == "native" and entry.route == "structured-delegate"
    assert entry.dtypes == pre.entries()["aten::eq.Tensor_out"].dtypes != {}


def test_cpp_kernel_computing_on_cpu_is_a_fallback(pre):
    entry = pre.entries()["aten::argsort.stable"]
    assert (entry.status, entry.route, entry.klass) == ("cpu_fallback", "cpp", None)


def test_provenance_and_unlisted_rule(pre):
    entry = pre.entries()["aten::add.Tensor"]
    assert entry.source == (prerelease_tsv.BLOB + "torch_neuronx/python_ops/torch_mlir/ops/binary.py#L9")
    assert entry.date == "2026-04-21"
    assert pre.lookup("aten::atan").status == "cpu_fallback" and pre.pre_release


def test_bad_header_names_file_and_line(tmp_path):
    bad = tmp_path / "x.tsv"
    bad.write_text("a\tb\n")
    with pytest.raises(InputFileError, match=r"x\.tsv:1: header"):
        prerelease_tsv.read_rows(bad)


def test_short_row_names_its_line(tmp_path):
    bad = tmp_path / "x.tsv"
    bad.write_text("\t".join(prerelease_tsv.HEADER) + "\naten::x\tnative\n")
    with pytest.raises(InputFileError, match=r"x\.tsv:2: expected 5"):
        prerelease_tsv.read_rows(bad)


@pytest.mark.skipif(
    not prerelease_tsv.DEFAULT_TSV.exists(), reason="shared data TSV is not next to this checkout"
)
def test_shipped_snapshot_regenerates_from_the_tsv_and_matches_readme_counts(tmp_path):
    out = tmp_path / "snap.json"
    assert prerelease_tsv.main([str(prerelease_tsv.DEFAULT_TSV), "--out", str(out)]) == 0
    shipped = db._data_dir() / f"{prerelease_tsv.VERSION}.json"
    assert out.read_text() == shipped.read_text()
    snap = db.load_snapshot_file(out)
    native_routes = prerelease_tsv.NATIVE_ROUTES
    with_kernel = [op for op, e in snap.entries().items() if set(e.route.split("+")) & native_routes]
    assert len(with_kernel) == 447  # README: distinct ops with an effective native row
    assert sum(e.klass == "Needs a process group" for e in snap.entries().values()) == 17


# --- compatibility table ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compat():
    return compat_table.import_compat_table(
        COMPAT, source="https://example.invalid/compat.md", date="2026-10-19"
    )


def test_compat_values_and_classes(compat):
    snap, _ = compat
    assert snap.version == "9.9.0" and not snap.pre_release  # version read from the heading
    assert (snap.lookup("aten::add.Tensor").status, snap.lookup("aten::add.Tensor").klass) == (
        "native",
        "Native",
    )
    assert snap.lookup("aten::fft_fft").status == "unsupported"
    assert snap.lookup("aten::quantize_per_tensor").status == "unsupported"
    assert snap.lookup("aten::linalg_qr.out").status == "cpu_fallback"  # bare aten name: all overloads
    assert snap.lookup("aten::relu").status == "unknown"  # unlisted = unknown


def test_compat_named_aten_ops_and_mapped_names(compat):
    snap, _ = compat
    assert "mapped from public API name torch.add" in snap.lookup("aten::add").note
    assert "mapped" not in snap.lookup("aten::linalg_qr").note
    assert snap.lookup("aten::_index_put_impl_").status == "cpu_fallback"  # second op named in one row
    assert snap.lookup("aten::index_put_").source == "https://example.invalid/compat.md#L27"
    assert snap.lookup("aten::gelu").klass == "Native"  # table with columns in another order


def test_compat_dtype_words(compat):
    snap, _ = compat
    assert snap.lookup("aten::cumprod", "int64").status == "cpu_fallback"
    assert snap.lookup("aten::cumprod", "complex64").status == "cpu_fallback"
    assert snap.lookup("aten::cumprod", "float32").status == "native"  # only the named dtypes fall back
    assert snap.lookup("aten::scaled_dot_product_attention", "bf16").note.startswith("Native; bf16")


def test_compat_rows_without_aten_op_are_counted_not_invented(compat):
    snap, stats = compat
    assert stats.rows == 15
    assert {"torch.distributed.all_reduce", "torch.backends.cudnn.benchmark"} <= set(stats.unmapped)
    assert not any("distributed" in op or "cudnn" in op for op in snap.entries())


def test_compat_without_a_value_column_is_one_line_error(tmp_path):
    md = tmp_path / "t.md"
    md.write_text("# t\n\nintro\n\n| API | Notes |\n|---|---|\n| torch.add | fast |\n")
    with pytest.raises(
        InputFileError, match=r"t\.md:5: no markdown table with a Y / CPU_FALLBACK / N column"
    ):
        compat_table.parse_table(md)
    md.write_text("no tables at all\n")
    with pytest.raises(InputFileError, match=r"t\.md:1: no markdown table"):
        compat_table.parse_table(md)


def test_compat_bad_value_names_the_row(tmp_path):
    md = tmp_path / "t.md"
    md.write_text(
        "| API | Supported |\n|---|---|\n| torch.add | Y |\n| torch.mul | Y |\n| torch.sub | maybe |\n"
    )
    with pytest.raises(InputFileError, match=r"t\.md:5: value 'maybe'"):
        compat_table.parse_table(md)


def test_compat_needs_a_version(tmp_path):
    md = tmp_path / "t.md"
    md.write_text("| API | Supported |\n|---|---|\n| torch.add | Y |\n")
    with pytest.raises(InputFileError, match="pass --version"):
        compat_table.import_compat_table(md)
    snap, _ = compat_table.import_compat_table(md, version="2.14.3")
    assert snap.version == "2.14.3" and snap.entries()["aten::add"].source.endswith("t.md:3")


@pytest.mark.parametrize(
    "api, aten",
    [
        ("torch.add", "aten::add"),
        ("torch.Tensor.add_", "aten::add_"),
        ("torch.nn.functional.gelu", "aten::gelu"),
        ("torch.linalg.qr", "aten::linalg_qr"),
        ("torch.special.erf", "aten::special_erf"),
        ("torch.fft.rfft", "aten::fft_rfft"),
        ("torch.nn.Linear", None),
        ("torch.distributed.all_reduce", None),
    ],
)
def test_public_api_mapping(api, aten):
    assert compat_table.aten_name_for_api(api) == aten


# --- registrations ------------------------------------------------------------------------------------------


def _fixture_registrations():
    return [ln for ln in (FIXTURES / "registrations.txt").read_text().splitlines() if not ln.startswith("#")]


def test_parse_registrations():
    assert registrations.parse_registrations(_fixture_registrations()) == [
        "aten::_to_copy",
        "aten::add.Tensor",
        "aten::add.out",
        "aten::empty.memory_format",
        "aten::mm",
        "aten::relu",
    ]


def test_registrations_are_an_upper_bound():
    snap = registrations.build_snapshot(
        _fixture_registrations(), version="2.14.3", torch_version="2.9.0", date="2026-11-01"
    )
    s = snap.lookup("aten::add.Tensor", "float32")
    assert s.status == "native" and s.note == registrations.UPPER_BOUND_NOTE and "2.14.3" in s.source
    assert snap.lookup("aten::add.Scalar").status == "cpu_fallback"  # not registered: boxed fallback
    assert "UPPER BOUND" in snap.description
    json.loads(db.dump_snapshot(snap))


def test_registrations_child_reads_the_dispatcher(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(FIXTURES / "fake_neuronx"))
    snap = registrations.import_registrations()
    assert snap.version == "0.0.0+fake-registrations" and snap.torch_neuronx_version == "0.0.0+fake"
    assert {"aten::add.Tensor", "aten::relu"} <= set(snap.entries())
    assert snap.lookup("aten::relu").note == registrations.UPPER_BOUND_NOTE
    assert snap.lookup("aten::mm").status == "cpu_fallback"
