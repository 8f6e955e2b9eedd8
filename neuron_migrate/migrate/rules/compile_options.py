"""NM501–NM503: `torch.compile` options that only mean something to Inductor on CUDA."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.conditions import any_string
from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.patterns import QualifiedNameRule, keyword, spells_names, without_argument
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement, Rule

#: torch.compile modes other than "default" (a `.compile(mode=...)` method is only trusted with one of these)
_MODES = ("reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs", "lite")
_INDUCTOR_KEYS = (
    "epilogue_fusion",
    "coordinate_descent_tuning",
    "shape_padding",
    "aggressive_fusion",
    "benchmark_kernel",
    "freezing",
    "use_mixed_mm",
)


def compile_call(rule: Rule, call: cst.Call, torch_specific: bool) -> bool:
    """Whether `call` is `torch.compile(...)`, or `x.compile(...)` with an argument only torch.compile
    takes."""
    if rule.ctx.call_name(call) == "torch.compile":
        return True
    func = call.func
    # `model.compile(...)` (nn.Module.compile) forwards to torch.compile; other `.compile` methods (re, keras)
    # are only accepted when the argument is unmistakably a torch.compile one
    return isinstance(func, cst.Attribute) and func.attr.value == "compile" and torch_specific


class CompileCudaMode(Rule):
    """`torch.compile(mode=...)` with a mode other than `"default"`.

    What it does
    Reports `torch.compile(..., mode="reduce-overhead" | "max-autotune" | "max-autotune-no-cudagraphs" | …)`
    (also as a decorator and as `model.compile(...)`).

    Why it matters on Trainium
    These modes tune Inductor's Triton kernels and use CUDA graphs. The `neuron` backend supports only the
    default mode: it warns and compiles with its default, so the code runs as it is.

    Example
    model = torch.compile(model, mode="max-autotune")

    Use instead
    model = torch.compile(model, mode="max-autotune")  # kept: tunes CUDA; neuron warns and uses its default

    Fix safety
    No automatic fix, on purpose: the call works on Trainium, and dropping the mode would only change CUDA
    runs (no autotuning, no CUDA graphs). The finding is information. Modes given as variables are not
    reported.
    """

    code = "NM501"
    name = "compile-cuda-mode"
    message = (
        "`mode={mode}` tunes Inductor and CUDA graphs; the neuron backend warns and compiles with its "
        "default mode: no change needed"
    )
    severity = "info"
    cuda_only = False
    triggers = ((b"compile", b"mode"),)
    VALID = (
        "import torch\nm = torch.compile(model)\n",
        "import torch\nm = torch.compile(model, mode='default')\n",
        "import re\np = re.compile('x')\n",
        "import torch\nm = torch.compile(model, mode=args.mode)\n",
    )
    INVALID = (
        Invalid(
            'import torch\nmodel = torch.compile(model, mode="max-autotune")\n',
        ),
        Invalid(
            "from torch import compile as tc\n@tc(mode='reduce-overhead', fullgraph=True)\ndef f(x):\n"
            "    return x\n",
        ),
        Invalid(
            "model.compile(\n    mode='max-autotune-no-cudagraphs',\n)\n",
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """`compile` and `mode` spelled, and a mode string (or, for `torch.compile`, any string but 'default',
        which a name may hold)."""
        return {"mode", "compile"} <= lex.names and (
            not lex.strings.isdisjoint(_MODES) or ("torch" in lex.names and bool(lex.strings - {"default"}))
        )

    def visit_Call(self, node: cst.Call) -> None:
        arg = keyword(node, "mode")
        mode = string_value(arg.value) if arg is not None else None
        if mode is None or mode == "default" or not compile_call(self, node, mode in _MODES):
            return
        self.report(arg, self.message.format(mode=repr(mode)))


class CompileDynamic(Rule):
    """`torch.compile(dynamic=True)`.

    What it does
    Flags `torch.compile(..., dynamic=True)` (also as a decorator and as `model.compile(...)`).

    Why it matters on Trainium
    The `neuron` backend compiles for static shapes: `dynamic=True` is rejected during compilation. Shapes
    that vary are compiled once per shape, so pad or bucket inputs to a few fixed shapes.

    Example
    model = torch.compile(model, dynamic=True)

    Use instead
    model = torch.compile(model)  # and pad inputs to a few fixed shapes

    Fix safety
    Unsafe: on CUDA, dropping `dynamic=True` lets the compiler specialise on the first shapes it sees and
    recompile when they change, which can cost time for inputs of many shapes.
    """

    code = "NM502"
    name = "compile-dynamic"
    message = (
        "`dynamic=True` is rejected by the neuron backend: compile for fixed shapes (pad or bucket inputs)"
    )
    severity = "warning"
    fix_safety = "unsafe"
    triggers = ((b"compile", b"dynamic"),)
    VALID = (
        "import torch\nm = torch.compile(model, dynamic=False)\n",
        "import torch\nm = torch.compile(model)\n",
        "import torch\ntorch._dynamo.mark_dynamic(x, 0)\n",
    )
    INVALID = (
        Invalid(
            "import torch\nm = torch.compile(model, dynamic=True, fullgraph=True)\n",
            "import torch\nm = torch.compile(model, fullgraph=True)\n",
        ),
        Invalid(
            "import torch\n@torch.compile(dynamic=True)\ndef f(x):\n    return x\n",
            "import torch\n@torch.compile()\ndef f(x):\n    return x\n",
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """`compile(..., dynamic=True)` spelled."""
        return {"dynamic", "True", "compile"} <= lex.names

    def visit_Call(self, node: cst.Call) -> None:
        arg = keyword(node, "dynamic")
        if arg is None or not (isinstance(arg.value, cst.Name) and arg.value.value == "True"):
            return
        if compile_call(self, node, True):
            self.report(
                arg,
                fix=FixSpec("Remove `dynamic=True`", (Replacement(node, without_argument(self, node, arg)),)),
            )


class CompileInductorOptions(QualifiedNameRule):
    """Inductor settings: `torch.compile(options={"triton.cudagraphs": ...})` and `torch._inductor.config.*`.

    What it does
    Flags `options={...}` dicts of `torch.compile` with Triton, CUDA-graph or autotuning keys
    (`triton.*`, `cuda.*`, `*cudagraph*`, `*autotune*`, `epilogue_fusion`, `coordinate_descent_tuning`, …),
    and every use of `torch._inductor.config`.

    Why it matters on Trainium
    The `neuron` backend does not use Inductor: it reads only a few options of its own and ignores the
    rest, so these settings silently stop doing anything.

    Example
    torch._inductor.config.coordinate_descent_tuning = True
    model = torch.compile(model, options={"triton.cudagraphs": True})

    Use instead
    model = torch.compile(model)  # backend "neuron" on Trainium; tune with the Neuron compiler's options

    Fix safety
    No automatic fix: the settings are harmless on Trainium and still tune CUDA runs. The finding is
    information.
    """

    code = "NM503"
    name = "compile-inductor-options"
    message = (
        "`{name}` configures Inductor, which the neuron backend does not use: it does nothing there "
        "(keep it for CUDA)"
    )
    severity = "info"
    fix_safety = "none"
    cuda_only = False
    triggers = (b"_inductor", (b"compile", b"options"))
    NAMES: ClassVar[dict[str, str | None]] = {"torch._inductor.config.*": None}
    VALID = (
        "import torch\nm = torch.compile(model, options={'model_name': 'gpt'})\n",
        "import torch\nm = torch.compile(model)\n",
        "import torch\ncfg = torch._dynamo.config.cache_size_limit\n",
    )
    INVALID = (
        Invalid(
            "import torch\n"
            "m = torch.compile(model, options={'triton.cudagraphs': True, 'max_autotune': True})\n",
        ),
        Invalid(
            "import torch._inductor.config as inductor_config\n"
            "inductor_config.coordinate_descent_tuning = True\n"
            "with inductor_config.patch(epilogue_fusion=False):\n    pass\n",
            count=2,
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """A use of `torch._inductor.config`, or `compile(options=...)` with a CUDA-only option key."""
        return spells_names(cls, lex) or (
            {"options", "compile"} <= lex.names and any_string(lex, _is_cuda_key)
        )

    def on_use(self, node: cst.Name | cst.Attribute, call: cst.Call | None, name: str) -> None:
        actual = self.ctx.qualified_name(node) or name
        self.report(call or node, self.message.format(name=actual))

    def visit_Call(self, node: cst.Call) -> None:
        arg = keyword(node, "options")
        if arg is None or not isinstance(arg.value, cst.Dict):
            return
        keys = [string_value(e.key) for e in arg.value.elements if isinstance(e, cst.DictElement)]
        cuda_keys = [k for k in keys if k is not None and _is_cuda_key(k)]
        if cuda_keys and compile_call(self, node, True):
            listed = ", ".join(repr(k) for k in cuda_keys)
            self.report(
                arg,
                f"Inductor options {listed} are ignored by the neuron backend (they still tune "
                "CUDA runs): no change needed",
            )


def _is_cuda_key(key: str) -> bool:
    return (
        key.startswith(("triton.", "cuda.", "cutlass"))
        or "cudagraph" in key
        or "autotune" in key
        or key in _INDUCTOR_KEYS
    )
