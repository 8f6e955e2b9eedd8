"""NM801: float64, which Neuron computes in float32 (`dtype=torch.float64`, `.double()`, float64 NumPy
arrays made into tensors on a device)."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.names import dotted
from neuron_migrate.migrate.rule import Invalid
from neuron_migrate.migrate.rules.dtype_uses import DtypeRule
from neuron_migrate.migrate.rules.numpy_float64 import (
    array_to_device,
    is_numpy_float64,
    numpy_float64_to_device,
)


class Float64(DtypeRule):
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
        return super().can_report(lex) or numpy_float64_to_device(lex)

    def visit_Call(self, node: cst.Call) -> None:
        super().visit_Call(node)
        array = array_to_device(self.ctx, node)
        if array is not None and is_numpy_float64(self.ctx, array):
            self.report(
                node,
                "a float64 NumPy array becomes a tensor on the device: float64 is computed in float32 "
                "on Neuron; convert it on purpose (`.float()` / `dtype=torch.float32`), or keep "
                "the precision-sensitive part on the CPU",
            )


#: the dtypes this rule flags, as spelled (`torch.float64`), and the calls that make float64 by their own
#: name (`torch.DoubleTensor(...)`, `x.double()`)
_DTYPES = frozenset(name for name in Float64.DTYPE_STRINGS if name.startswith("torch."))
_MAKERS = frozenset(name.rsplit(".", 1)[-1] for name in Float64.NAMES if name not in Float64.DTYPE_STRINGS)


def makes_float64(value: cst.BaseExpression) -> bool:
    """Whether the call `value` makes float64 data, read by spelling: `torch.DoubleTensor(...)`,
    `x.double()`, a conversion to a float64 dtype (`x.to(torch.float64)`), a `dtype=torch.double`."""
    if not isinstance(value, cst.Call):
        return False
    method = value.func.attr.value if isinstance(value.func, cst.Attribute) else ""
    if method in _MAKERS:
        return True
    return any(
        ((arg.keyword is None and method in ("to", "type")) or (arg.keyword and arg.keyword.value == "dtype"))
        and dotted(arg.value) in _DTYPES
        for arg in value.args
    )


def spells_float64(node: cst.CSTNode) -> bool:
    """Whether `node` names the float64 dtype: `torch.float64` / `torch.double`, a `.double()` conversion, or
    a dtype string (`"float64"`, as in `default_dtype="float64"`)."""
    if isinstance(node, cst.Attribute):
        return dotted(node) in _DTYPES
    if isinstance(node, cst.SimpleString):
        return string_value(node) in Float64.DTYPE_STRINGS
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in Float64.METHODS
        and not node.args
    )
