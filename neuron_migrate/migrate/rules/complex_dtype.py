"""NM802: complex tensors, which Neuron supports only partly (complex dtypes, `torch.fft`, ...)."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.patterns import keyword
from neuron_migrate.migrate.rule import Invalid
from neuron_migrate.migrate.rules.dtype_uses import DtypeRule


class ComplexDtype(DtypeRule):
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
