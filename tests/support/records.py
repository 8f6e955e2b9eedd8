"""Small hand-made records for report tests: a trace of the example GPT with every op status."""

from __future__ import annotations

from pathlib import Path

from neuron_migrate.model import CallSite, Coverage, Finding, Fix, OpUse, TraceResult

MODEL = "examples/cuda_project/model.py"
_MODEL_LINES = (Path(__file__).resolve().parents[2] / MODEL).read_text().splitlines()


def line_of(text: str) -> int:
    """The line of the example's model.py that contains `text` (so edits to the example do not shift
    sites)."""
    return next(number for number, line in enumerate(_MODEL_LINES, 1) if text in line)


def example_trace(pre_release: bool = True) -> TraceResult:
    """A trace of examples/cuda_project with native, CPU-fallback, unsupported and unknown ops.

    Call sites point at real lines of the example's model.py, so the report can quote them.
    """
    ops = (
        OpUse(
            "aten::addmm",
            ("float32",),
            480,
            "forward",
            (CallSite(MODEL, line_of("self.qkv(x)"), "forward", 480),),
            "native",
        ),
        OpUse(
            "aten::mm",
            ("float32",),
            960,
            "backward",
            (CallSite(MODEL, line_of("self.qkv(x)"), "forward", 960),),
            "native",
        ),
        OpUse(
            "aten::split.Tensor",
            ("float32",),
            24,
            "forward",
            (CallSite(MODEL, line_of(".split(C, dim=2)"), "forward", 24),),
            "cpu_fallback",
            note="no eager kernel: boxed CPU fallback",
            source="fixture",
        ),
        OpUse(
            "aten::_scaled_dot_product_efficient_attention",
            ("float32",),
            24,
            "forward",
            (CallSite(MODEL, line_of("F.scaled_dot_product_attention("), "forward", 24),),
            "cpu_fallback",
            note="no eager kernel",
            source="fixture",
        ),
        OpUse(
            "aten::_scaled_dot_product_efficient_attention_backward",
            ("float32",),
            24,
            "backward",
            (CallSite(MODEL, line_of("F.scaled_dot_product_attention("), "forward", 24),),
            "unsupported",
            note="not registered",
            source="fixture",
        ),
        OpUse(
            "aten::_log_softmax",
            ("float64",),
            1,
            "forward",
            (CallSite(MODEL, line_of("F.log_softmax(logits.double()"), "eval_nll", 1),),
            "unknown",
        ),
        OpUse(
            "aten::_foreach_add_.Scalar",
            ("float32",),
            1000,
            "optimizer",
            (),
            "cpu_fallback",
            note="optimizer step falls back",
            source="fixture",
        ),
    )
    return TraceResult(
        target="examples/cuda_project/trace_target.py:build",
        device="stand-in",
        phases=("forward", "backward", "optimizer"),
        opdb_version="2.13.3-prerelease-2026-04-21",
        opdb_pre_release=pre_release,
        ops=ops,
        coverage=Coverage.of(ops),
        tool_version="0.1.0",
    )


def finding(
    code: str,
    path: str = "train.py",
    line: int = 1,
    fixable: str = "safe",
    message: str = "a message",
    category: str = "device",
) -> Finding:
    """A finding with just what the effort model reads."""
    fix = Fix("rewrite", fixable) if fixable != "none" else None
    return Finding(
        code=code,
        severity="warning",
        category=category,
        path=path,
        line=line,
        col=0,
        end_line=line,
        end_col=1,
        message=message,
        source="x = 1",
        fix=fix,
    )
