"""NM801 / NM802: dtypes whose numerics change on Trainium: float64 (computed in float32) and complex.

A dtype counts where it makes or converts data (`dtype=torch.float64`, `.to(torch.double)`, `.double()`,
`set_default_dtype`), not where code only inspects one (`x.dtype == torch.float64`, dict keys, `torch.finfo`).
"""

from __future__ import annotations

import re
from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.conditions import BETWEEN, module_aliases
from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.patterns import QualifiedNameRule, keyword, spells_names
from neuron_migrate.migrate.rule import Invalid

#: calls whose dtype argument is only inspected
_INSPECTORS = {
    "torch.finfo",
    "torch.iinfo",
    "isinstance",
    "issubclass",
    "torch.is_complex",
    "torch.is_floating_point",
}
_LOADERS = ("from_pretrained", "from_config")  # Hugging Face loaders take dtype names as strings


class _DtypeRule(QualifiedNameRule):
    """Uses of dtype names in `NAMES`, zero-argument conversion methods in `METHODS`, dtype strings."""

    METHODS: ClassVar[tuple[str, ...]] = ()
    DTYPE_STRINGS: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """A use of NAMES, a call of one of METHODS, or a dtype string passed as `dtype=` / `torch_dtype=`;
        a rule with checks of its own adds what they need."""
        return (
            spells_names(cls, lex)
            or not lex.names.isdisjoint(cls.METHODS)
            or (bool({"dtype", "torch_dtype"} & lex.names) and not lex.strings.isdisjoint(cls.DTYPE_STRINGS))
        )

    def on_use(self, node: cst.Name | cst.Attribute, call: cst.Call | None, name: str) -> None:
        if call is None and _only_inspected(self.ctx):
            return
        self.report(call or node, self.message_for(name))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in self.METHODS and not node.args:
            self.report(node, self.message_for(f".{func.attr.value}()"))
            return
        name = self.ctx.call_name(node) or ""
        loader = isinstance(func, cst.Attribute) and func.attr.value in _LOADERS
        for arg in node.args:
            if arg.keyword is None or string_value(arg.value) not in self.DTYPE_STRINGS:
                continue
            if arg.keyword.value == "torch_dtype" or (
                arg.keyword.value == "dtype" and (loader or name.startswith("torch."))
            ):
                self.report(arg.value, self.message_for(string_value(arg.value)))


def _only_inspected(ctx) -> bool:
    """Whether the visited dtype is compared, used as a dict key or annotation, or passed to `torch.finfo`."""
    child = ctx.node
    for level in range(1, 8):
        parent = ctx.ancestor(level)
        if isinstance(parent, (cst.Element, cst.Tuple, cst.List, cst.Set)):
            child = parent
            continue
        if isinstance(parent, (cst.Comparison, cst.ComparisonTarget, cst.Annotation)):
            return True
        if isinstance(parent, cst.DictElement):  # a key, or a value in a dtype -> dtype table
            return child is parent.key or (ctx.qualified_name(parent.key) or "").startswith("torch.")
        if isinstance(parent, cst.Arg):
            call = ctx.ancestor(level + 1)
            return isinstance(call, cst.Call) and ctx.call_name(call) in _INSPECTORS
        return False
    return False


class Float64(_DtypeRule):
    """float64 tensors.

    What it does
    Flags `torch.float64` / `torch.double` used as a value (`dtype=`, `.to(...)`, `set_default_dtype`),
    `.double()` conversions, `torch.DoubleTensor`, `torch_dtype="float64"` for model loaders, and NumPy
    arrays that are float64 by default (`np.zeros`, `np.random.rand`, `np.array([0.5, ...])`, … without a
    `dtype=`) turned into tensors on a device (`torch.from_numpy(a).to(device)`, `torch.tensor(a,
    device=...)`, `torch.as_tensor(a, device=...)`). Comparisons such as `x.dtype == torch.float64` are not
    flagged.

    Why it matters on Trainium
    NeuronCores have no float64 arithmetic: TorchNeuron casts 64-bit inputs to float32, computes, and casts
    the result back. The code runs, but with float32 precision, which matters for accumulations, losses
    compared against tolerances, and numerically sensitive algorithms.

    Example
    loss = criterion(logits.double(), target)

    Use instead
    loss = criterion(logits.float(), target)  # or keep the precision-sensitive part on the CPU

    Fix safety
    No automatic fix: whether float32 is precise enough is a decision about the algorithm.
    """

    code = "NM801"
    name = "float64"
    message = (
        "`{name}`: float64 is computed in float32 on Neuron (64-bit inputs are downcast): use float32, "
        "or keep precision-sensitive code on the CPU"
    )
    severity = "warning"
    cuda_only = False
    triggers = (b"float64", b"double", b"Double", b"from_numpy", (b"numpy", b"device"))
    NAMES: ClassVar[dict[str, str | None]] = dict.fromkeys(
        ("torch.float64", "torch.double", "torch.DoubleTensor", "torch.Tensor.double")
    )
    METHODS = ("double",)
    DTYPE_STRINGS = frozenset({"float64", "double", "torch.float64", "torch.double"})
    VALID = (
        "import torch\nx = torch.zeros(3, dtype=torch.float32).float()\n",
        "import numpy as np\nimport torch\na = np.zeros(3, dtype=np.float32)\n"
        "x = torch.from_numpy(a).to(device)\n"
        "y = torch.from_numpy(np.ones(3)).float().to(device)\nz = torch.tensor(np.ones(3))\n",
        "import torch\nif x.dtype in (torch.float32, torch.float64):\n    pass\n",
        "import torch\neps = torch.finfo(torch.float64).eps\nnames = {torch.float64: 'f64'}\n",
        "import torch\nwider = {torch.float32: torch.float64, torch.int32: torch.int64}\n",
        "import numpy as np\na = np.zeros(3, dtype='float64').astype(np.double)\n",
        "# cast to torch.float64 for the loss\nprint('use .double() on CPU')\n",
    )
    INVALID = (
        Invalid(
            "import torch\nx = torch.zeros(3, dtype=torch.float64)\ny = x.to(torch.double)\n",
            count=2,
        ),
        Invalid(
            "import numpy as np\nimport torch\nnoise = np.random.randn(4, 8)\n"
            "x = torch.from_numpy(noise).to(device)\n"
            "w = torch.tensor(np.linspace(0, 1, 8), device=device)\n",
            count=2,
        ),
        Invalid(
            "import torch\ntorch.set_default_dtype(torch.float64)\n",
        ),
        Invalid(
            "def loss(logits, target):\n    return ((logits.double() - target) ** 2).mean()\n",
        ),
        Invalid(
            "from torch import float64 as f64\ndef zeros(n, dtype=f64):\n    return n\n",
        ),
        Invalid(
            "from transformers import AutoModel\nm = AutoModel.from_pretrained(path, "
            "torch_dtype='float64')\n",
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """The dtype checks, or a float64 NumPy array made into a tensor on a device."""
        return super().can_report(lex) or _numpy_float64_to_device(lex)

    def visit_Call(self, node: cst.Call) -> None:
        super().visit_Call(node)
        array = _array_to_device(self.ctx, node)
        if array is not None and _numpy_float64(self.ctx, array):
            self.report(
                node,
                "a float64 NumPy array becomes a tensor on the device: float64 is computed in float32 "
                "on Neuron; convert it on purpose (`.float()` / `dtype=torch.float32`), or keep "
                "the precision-sensitive part on the CPU",
            )


#: NumPy functions that make float64 arrays unless given a `dtype=`
_NUMPY_FLOAT64 = {
    f"numpy.{name}"
    for name in (
        "zeros",
        "ones",
        "empty",
        "full",
        "linspace",
        "logspace",
        "eye",
        "identity",
        "loadtxt",
        "genfromtxt",
    )
} | {
    f"numpy.random.{name}"
    for name in ("rand", "randn", "random", "uniform", "normal", "standard_normal", "random_sample")
}
#: the makers as a call spells them after the module (`np.zeros`, `np.random.rand`)
_MAKERS = frozenset(name.rsplit(".", 1)[1] for name in _NUMPY_FLOAT64)
_MAKER_CALL = rf"(?P<maker>{'|'.join(sorted(_MAKERS))}|array|asarray){BETWEEN}\("
_DTYPE_KEYWORD = re.compile(r"\bdtype\s*=")
_FLOAT_LITERAL = re.compile(r"\d\.|\.\d|\de")


def _numpy_float64_to_device(lex: Lexicon) -> bool:
    """`Float64`'s array check in the pre-pass: a call of a NumPy function that makes float64 arrays
    (`np.zeros(...)`, ...) without `dtype=`, or `np.array` / `np.asarray` of a literal with a float in it, and
    `torch.from_numpy`, or `torch.tensor` / `torch.as_tensor` with `device=`.

    `zeros`, `ones`, `full` are torch's names too, so the call must be spelled on a NumPy alias that an import
    binds (`np.zeros`, `numpy.random.rand`); a file that imports names from NumPy directly (`from numpy import
    zeros`) keeps the looser test."""
    if "numpy" not in lex.imported or (_MAKERS | {"array", "asarray"}).isdisjoint(lex.names):
        return False
    to_device = "device" in lex.names and bool({"tensor", "as_tensor"} & lex.names)
    if not ("from_numpy" in lex.names or to_device):
        return False
    if re.search(r"\bfrom\s+numpy\b", lex.text):
        return True
    aliases = module_aliases(lex.text, "numpy")
    if not aliases:
        return False
    spelled = rf"\b(?:{'|'.join(map(re.escape, aliases))}){BETWEEN}\.(?:{BETWEEN}random{BETWEEN}\.)?"
    for call in re.finditer(rf"{spelled}{BETWEEN}{_MAKER_CALL}", lex.text):
        literal = call.group("maker") in ("array", "asarray")
        if literal and not re.match(rf"{BETWEEN}[\[(]", lex.text[call.end() :]):
            continue  # the rule reads only a literal list or tuple here
        arguments = _arguments(lex.text, call.end())
        if arguments is None:  # cannot tell where the call ends: keep the rule
            return True
        if _DTYPE_KEYWORD.search(arguments):
            continue  # an explicit dtype: the rule does not flag this array
        if not literal or _FLOAT_LITERAL.search(arguments):
            return True
    return False


def _arguments(text: str, start: int) -> str | None:
    """The text between the `(` that ends at `start` and its closing parenthesis, or None when that is not
    certain: no closing parenthesis, or a string or comment inside (a parenthesis in it would miscount)."""
    depth = 1
    for index in range(start, min(len(text), start + 2000)):
        char = text[index]
        if char in "\"'#":
            return None
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return text[start:index]
    return None


def _array_to_device(ctx, call: cst.Call) -> cst.BaseExpression | None:
    """The NumPy array in `torch.from_numpy(a).to(device)` / `.cuda()`, `torch.tensor(a, device=...)`."""
    func = call.func
    if (
        isinstance(func, cst.Attribute)
        and func.attr.value in ("to", "cuda")
        and isinstance(func.value, cst.Call)
    ):
        inner = func.value
        if (
            ctx.call_name(inner) == "torch.from_numpy"
            and inner.args
            and (func.attr.value == "cuda" or call.args)
        ):
            first = call.args[0].value if call.args else None
            if first is None or not _is_dtype(ctx, first):
                return inner.args[0].value
    if (
        ctx.call_name(call) in ("torch.tensor", "torch.as_tensor")
        and call.args
        and keyword(call, "device")
        and keyword(call, "dtype") is None
    ):
        return call.args[0].value
    return None


def _is_dtype(ctx, node: cst.BaseExpression) -> bool:
    return (ctx.qualified_name(node) or "").startswith("torch.") and "float" in (
        ctx.qualified_name(node) or ""
    )


def _numpy_float64(ctx, node: cst.BaseExpression | None, depth: int = 0) -> bool:
    """Whether `node` is (a name assigned) a NumPy array that is float64: made by a float64-by-default
    function without `dtype=`, or `np.array` of float literals."""
    if node is None or depth > 2:
        return False
    if isinstance(node, cst.Name):
        values = ctx.bindings.values(node.value)
        return bool(values) and all(_numpy_float64(ctx, v, depth + 1) for v in values)
    if not isinstance(node, cst.Call):
        return False
    name = ctx.call_name(node) or ""
    if name in _NUMPY_FLOAT64:
        return keyword(node, "dtype") is None
    if name in ("numpy.array", "numpy.asarray") and node.args and keyword(node, "dtype") is None:
        values = node.args[0].value
        elements = values.elements if isinstance(values, (cst.List, cst.Tuple)) else ()
        return any(isinstance(e.value, cst.Float) for e in elements)
    return False


class ComplexDtype(_DtypeRule):
    """Complex tensors.

    What it does
    Flags the complex dtypes (`torch.complex64`, `complex128`, `cfloat`, `cdouble`, `chalf`) used as values,
    `.cfloat()` / `.cdouble()` / `.chalf()`, and the operations that certainly make or take complex tensors:
    `torch.view_as_complex`, `torch.view_as_real`, `torch.complex`, `torch.polar`, the `torch.fft` transforms
    (not `fftfreq` / `fftshift`) and `stft(..., return_complex=True)`.

    Why it matters on Trainium
    The Neuron compiler has no native complex data types: TorchNeuron decomposes complex operations into
    real ones, and those it cannot decompose fail to compile or run on the CPU. Results and speed need
    checking on the device.

    Example
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))

    Use instead
    cos, sin = freqs.cos(), freqs.sin()  # rotary embeddings with real cos/sin tensors
    xq_out = xq * cos + rotate_half(xq) * sin

    Fix safety
    No automatic fix: rewriting complex math with real tensors changes the algorithm's code.
    """

    code = "NM802"
    name = "complex-dtype"
    message = (
        "`{name}` uses complex tensors, which Neuron supports only partly: test this path on Neuron, "
        "or carry real and imaginary parts as float tensors"
    )
    severity = "warning"
    cuda_only = False
    triggers = (b"complex", b"cfloat", b"cdouble", b"chalf", b"view_as_real", b"polar", b"fft", b"stft")
    _FFT = (
        "fft",
        "ifft",
        "fft2",
        "ifft2",
        "fftn",
        "ifftn",
        "rfft",
        "irfft",
        "rfft2",
        "irfft2",
        "rfftn",
        "irfftn",
        "hfft",
        "ihfft",
        "hfft2",
        "ihfft2",
        "hfftn",
        "ihfftn",
    )
    NAMES: ClassVar[dict[str, str | None]] = dict.fromkeys(
        (
            *(f"torch.{n}" for n in ("complex64", "complex128", "complex32", "cfloat", "cdouble", "chalf")),
            *(f"torch.{n}" for n in ("view_as_complex", "view_as_real", "complex", "polar")),
            *(f"torch.Tensor.{n}" for n in ("cfloat", "cdouble", "chalf")),
            *(f"torch.fft.{n}" for n in _FFT),
        )
    )
    METHODS = ("cfloat", "cdouble", "chalf")
    DTYPE_STRINGS = frozenset({"complex64", "complex128", "cfloat", "cdouble"})
    VALID = (
        "import torch\nfreqs = torch.fft.rfftfreq(n)\ny = torch.fft.fftshift(x)\n",
        "import torch\nok = x.dtype in (torch.complex64, torch.complex128) or torch.is_complex(x)\n",
        "import torch\nspec = torch.stft(x, 400, return_complex=False)\nz = complex(1, 2)\n",
        "import numpy as np\nz = np.zeros(3, dtype=np.complex64)\n",
    )
    INVALID = (
        Invalid(
            "import torch\nfreqs_cis = torch.polar(torch.ones_like(f), f)\nz = torch.view_as_complex(x)\n",
            count=2,
        ),
        Invalid(
            "import torch.fft as fft\nspec = fft.rfft(signal, dim=-1)\n",
        ),
        Invalid(
            "from torch import cfloat\nz = torch.zeros(2, dtype=cfloat)\nw = z.cdouble()\n",
            count=2,
        ),
        Invalid(
            "import torch\nspec = torch.stft(wave, 400, window=w, return_complex=True)\n",
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """The dtype checks, or `stft(..., return_complex=True)`."""
        return super().can_report(lex) or {"stft", "return_complex", "True"} <= lex.names

    def visit_Call(self, node: cst.Call) -> None:
        super().visit_Call(node)
        func = node.func
        is_stft = (isinstance(func, cst.Attribute) and func.attr.value == "stft") or (
            self.ctx.call_name(node) == "torch.stft"
        )
        flag = keyword(node, "return_complex")
        if is_stft and flag is not None and isinstance(flag.value, cst.Name) and flag.value.value == "True":
            self.report(node, self.message_for("stft(return_complex=True)"))
