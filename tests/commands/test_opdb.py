"""`neuron-migrate opdb ...`: in-process with typer's CliRunner, and through `python -m neuron_migrate` for
the error handling that `cli.main()` adds."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from neuron_migrate.commands import opdb as opdb_cmd
from neuron_migrate.opdb import db
from tests.support import OPDB_FIXTURES

FIXTURES = OPDB_FIXTURES


@pytest.fixture(scope="module")
def invoke():
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    opdb_cmd.register(app)
    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(app, ["opdb", *args], env={"COLUMNS": "200"})

    return run


def test_versions(invoke):
    res = invoke("versions")
    assert res.exit_code == 0 and "2.13.3-prerelease-2026-04-21" in res.stdout and "yes" in res.stdout


def test_show_base_name_lists_overloads_dtypes_and_provenance(invoke):
    res = invoke("show", "aten::add")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "PRE-RELEASE" in out and "aten::add.Tensor" in out and "aten::add.out" in out and "float64" in out
    assert "source aten::add.Tensor: https://github.com/parmoham-aws/test-repo-parmoham/blob/98154b86" in out


def test_show_unlisted_op_says_which_rule(invoke):
    res = invoke("show", "aten.linalg_qr.default")
    assert (
        res.exit_code == 0 and "snapshot rule for unlisted ops" in res.stdout and "cpu_fallback" in res.stdout
    )


def test_show_unknown_with_a_snapshot_without_rule(invoke, tmp_path):
    res = invoke("show", "aten::relu", "--opdb", str(FIXTURES / "standin-config.json"))
    assert res.exit_code == 0 and "native" in res.stdout
    compat = tmp_path / "c.json"
    assert (
        invoke(
            "import", "compat-table", str(FIXTURES / "torch_api_compatibility.md"), "--out", str(compat)
        ).exit_code
        == 0
    )
    res = invoke("show", "aten::relu", "--opdb", str(compat))
    assert "unknown" in res.stdout and "no source" in res.stdout


def test_list_json_filters_by_status_and_dtype(invoke):
    res = invoke("list", "--status", "unknown", "--dtype", "complex64", "--format", "json")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    ops = {r["op"] for r in doc["ops"]}
    assert doc["pre_release"] is True and "aten::mul.Tensor" in ops and "aten::add.Tensor" not in ops
    assert all(r["status"] == "unknown" for r in doc["ops"])
    every = json.loads(invoke("list", "--format", "json").stdout)["ops"]
    assert len(every) == len(db.load_snapshot().entries())


def test_diff_against_a_probe_style_snapshot(invoke):
    res = invoke(
        "diff", "2.13.3-prerelease-2026-04-21", str(FIXTURES / "standin-config.json"), "--format", "json"
    )
    assert res.exit_code == 0
    changes = {c["op"]: c for c in json.loads(res.stdout)["changes"]}
    assert changes["aten::sin"]["kind"] == "changed" and changes["aten::sin"]["after"] == "unsupported"
    assert changes["aten::add.out"]["kind"] == "removed"


def test_import_compat_table_writes_a_loadable_snapshot(invoke, tmp_path):
    out = tmp_path / "compat.json"
    res = invoke(
        "import",
        "compat-table",
        str(FIXTURES / "torch_api_compatibility.md"),
        "--version",
        "2.13.3",
        "--out",
        str(out),
    )
    assert res.exit_code == 0, res.output
    snap = db.load_snapshot(str(out))
    assert snap.version == "2.13.3" and snap.lookup("aten::linalg_qr").status == "cpu_fallback"


def test_probe_cli_on_stand_in_with_shipped_snapshot(invoke, tmp_path):
    pytest.importorskip("expecttest")
    out = tmp_path / "probe.json"
    res = invoke(
        "probe",
        "--device",
        "neuron",
        "--stand-in",
        "--ops",
        "mul,atan",
        "--dtypes",
        "float32,complex64",
        "--samples",
        "1",
        "--out",
        str(out),
    )
    assert res.exit_code == 0, res.output
    snap = db.load_snapshot_file(out)
    assert snap.pre_release  # configured from the pre-release snapshot, so the result says so too
    # complex64 mul is unknown in the snapshot: the stand-in runs what it does not know through its CPU
    # fallback
    assert snap.lookup("aten::mul.Tensor", "complex64").status == "cpu_fallback"
    assert snap.lookup("aten::mul.Tensor", "float32").status == "native"
    # atan has no neuron kernel: whichever atan overload the device dispatched (functional or out=) fell back
    atan = {
        op: e.dtypes["float32"].status for op, e in snap.entries().items() if db.base_name(op) == "aten::atan"
    }
    assert atan and set(atan.values()) == {"cpu_fallback"}


# --- through cli.main(): one error line, exit 2 -------------------------------------------------------------


@pytest.mark.parametrize(
    "args, words",
    [
        (["opdb", "show", "aten::add", "--opdb", "0.0.1"], "unknown opdb version '0.0.1'"),
        (["opdb", "list", "--status", "fast"], "--status 'fast' is not one of"),
        (["opdb", "import", "registrations"], "torch_neuronx is not importable"),
        (
            ["opdb", "import", "compat-table", "README.md"],
            "no markdown table with a Y / CPU_FALLBACK / N column",
        ),
        (["opdb", "probe", "--device", "cuda"], "--device 'cuda' is not supported"),
    ],
)
def test_errors_are_one_line_exit_2(run_cli, tmp_path, args, words):
    (tmp_path / "README.md").write_text("# nothing here\n")
    res = run_cli(*args)
    assert res.returncode == 2, res.stderr
    assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
