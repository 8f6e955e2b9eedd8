"""Pure parts of the recorder and the summary: no device is registered in this process."""

from __future__ import annotations

import io
import os
from pathlib import Path

import torch
from rich.console import Console

from neuron_migrate.model import CallSite, Coverage, OpUse, TraceResult
from neuron_migrate.opdb.db import snapshot_from_dict
from neuron_migrate.opdb.tracer.recorder import SiteFinder, op_name, op_route, worst_support
from neuron_migrate.reports.trace_text import render_summary

SNAPSHOT = snapshot_from_dict(
    {
        "schema": "neuron-migrate/opdb/1",
        "version": "unit-1",
        "torch_neuronx_version": "x",
        "pre_release": True,
        "unlisted": None,
        "ops": {
            "aten::add.Tensor": {"status": "native", "dtypes": {"float64": {"status": "cpu_fallback"}}},
            "aten::t": {"status": "native"},
            "aten::expand": {"status": "cpu_fallback", "route": "boxed-fallback"},
            "aten::split.Tensor": {"status": "cpu_fallback", "route": "python-cpu-registration"},
        },
    },
    "unit",
)


def test_op_names_follow_the_opdb_spelling_and_drop_noise():
    assert op_name(torch.ops.aten.add.Tensor) == "aten::add.Tensor"
    assert op_name(torch.ops.aten.relu.default) == "aten::relu"
    assert op_name(torch.ops.prim.device.default) is None


def test_worst_dtype_decides():
    assert worst_support(SNAPSHOT, "aten::add.Tensor", ("float32",)).status == "native"
    assert worst_support(SNAPSHOT, "aten::add.Tensor", ("float32", "float64")).status == "cpu_fallback"
    assert worst_support(SNAPSHOT, "aten::mul.Tensor", ("float32",)).status == "unknown"


def test_routes_mirror_a_backend():
    aten = torch.ops.aten
    assert op_route(SNAPSHOT, aten.t.default, "aten::t") == "record"  # listed: the backend kernel runs
    assert op_route(SNAPSHOT, aten.transpose.int, "aten::transpose.int") == "decompose"  # composite, unlisted
    assert op_route(SNAPSHOT, aten.detach.default, "aten::detach") == "silent"  # metadata-only composite
    assert op_route(SNAPSHOT, aten.mm.default, "aten::mm") == "record"  # no composite: CPU fallback on neuron
    # a boxed-fallback entry claims no kernel, so the composite runs; an explicit CPU registration is a kernel
    assert op_route(SNAPSHOT, aten.expand.default, "aten::expand") == "decompose"
    assert op_route(SNAPSHOT, aten.split.Tensor, "aten::split.Tensor") == "record"


def test_site_paths(tmp_path):
    finder = SiteFinder(tmp_path)
    site_packages = os.path.join(os.sep, "venv", "lib", "python3.11", "site-packages")
    assert (
        finder.display_name(os.path.join(site_packages, "transformers", "models", "x.py"))
        == "transformers/models/x.py"
    )
    assert finder.display_name(os.path.join(site_packages, "torch", "nn", "modules", "linear.py")) is None
    assert finder.display_name(torch.__file__) is None
    assert finder.display_name(str(tmp_path / "pkg" / "model.py")) == "pkg/model.py"
    outside = Path(os.sep, "elsewhere", "train.py")
    assert finder.display_name(str(outside)) == outside.as_posix()
    assert finder.display_name(os.__file__) is None  # the standard library is not user code
    assert finder.display_name("<frozen importlib._bootstrap>") is None


def _result(uses, pre_release=True):
    return TraceResult(
        target="t",
        device="stand-in",
        phases=("forward",),
        opdb_version="unit-1",
        opdb_pre_release=pre_release,
        ops=tuple(uses),
        coverage=Coverage.of(uses),
    )


def test_summary_ranks_non_native_ops_by_calls_with_sites():
    uses = [
        OpUse("aten::mm", ("float32",), 50, "forward", status="native"),
        OpUse(
            "aten::cumsum", ("float32",), 3, "forward", (CallSite("m.py", 7, "f", 3),), status="cpu_fallback"
        ),
        OpUse(
            "aten::sort",
            ("int64",),
            9,
            "forward",
            (CallSite("m.py", 9, "f", 5), CallSite("n.py", 2, "g", 4)),
            status="unknown",
        ),
        OpUse("aten::sort", ("int64",), 2, "backward", (CallSite("m.py", 9, "f", 2),), status="unknown"),
    ]
    out = io.StringIO()
    render_summary(_result(uses), Console(file=out, width=200), top=10)
    text = out.getvalue()
    assert "PRE-RELEASE" in text and "unit-1" in text
    assert text.index("aten::sort") < text.index("aten::cumsum")  # 11 calls before 3
    assert "m.py:9 (7)" in text and "n.py:2 (4)" in text
    assert "aten::mm " not in text.split("non-native")[1]


def test_summary_without_pre_release_or_fallbacks():
    out = io.StringIO()
    render_summary(
        _result([OpUse("aten::mm", ("float32",), 5, "forward", status="native")], False),
        Console(file=out, width=200),
    )
    assert "PRE-RELEASE" not in out.getvalue() and "every recorded op is native" in out.getvalue()
