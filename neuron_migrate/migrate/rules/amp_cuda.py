"""NM201–NM203: the deprecated CUDA-only mixed-precision API `torch.cuda.amp`."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.amp import (
    CUDA_AUTOCAST_DTYPE,
    bind_arguments,
    enabled_value,
    is_literal,
    keyword_arguments,
    rebuilt_safety,
)
from neuron_migrate.migrate.fixes import DEVICE_TYPE, DEVICE_TYPE_EXPR
from neuron_migrate.migrate.patterns import QualifiedNameRule
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement

_DEV = DEVICE_TYPE_EXPR
_ON = "torch.accelerator.is_available()"


class CudaAmpAutocast(QualifiedNameRule):
    """`torch.cuda.amp.autocast`, as a context manager or a decorator.

    What it does
    Flags calls and decorators of `torch.cuda.amp.autocast`, however it was imported (`from torch.cuda.amp
    import autocast as ac`, imports inside a function, `from torch.cuda import amp`).

    Why it matters on Trainium
    `torch.cuda.amp.autocast` only ever casts for CUDA: on a `neuron` device it is silently off and the model
    runs in float32. `torch.amp.autocast(device_type, ...)` casts for the device it is given. Its default
    dtype depends on the device (float16 on CUDA and on PrivateUse1 devices such as `neuron`, bfloat16 on
    CPU), so the rewrite states CUDA's float16. On Trainium bfloat16 is usually the better choice (no loss
    scaling needed): change the dtype deliberately after the migration.

    Example
    with torch.cuda.amp.autocast():
        loss = model(x)

    Use instead
    device_type = (torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")).type
    with torch.amp.autocast(device_type, dtype=torch.float16, enabled=torch.accelerator.is_available()):
        loss = model(x)

    Fix safety
    Safe: on CUDA the new call casts exactly as before (float16, same `enabled` and `cache_enabled`); without
    an accelerator it stays off, as the CUDA version was (the `enabled=` guard; it is left out under an
    existing availability check). A decorator's device type is evaluated at import time, after TorchNeuron
    has registered `neuron`. Uses that are not calls (`partial(torch.cuda.amp.autocast, ...)`) and calls
    with `*args`/`**kwargs` are reported without a fix. The call is rewritten on one line: when it held
    comments, the fix is unsafe (the comments are dropped), as for NM202–NM205.
    """

    code = "NM201"
    name = "cuda-amp-autocast"
    message = (
        "`torch.cuda.amp.autocast` is CUDA-only and deprecated: use `torch.amp.autocast(device_type, ...)`"
    )
    severity = "error"
    fix_safety = "safe"
    triggers = (b"autocast",)
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {
        "torch.cuda.amp.autocast": None,
        "torch.cuda.amp.autocast_mode.autocast": None,
    }
    PARAMS = ("enabled", "dtype", "cache_enabled")  # torch.cuda.amp.autocast's positional order
    ORDER = ("dtype", "enabled", "cache_enabled")  # torch.amp.autocast's
    VALID = (
        "import torch\nwith torch.amp.autocast('cpu', dtype=torch.bfloat16):\n    pass\n",
        "import torch\nwith torch.cpu.amp.autocast():\n    pass\n",
        "from apex.amp import autocast\nwith autocast():\n    pass\n",
        '"""Wraps torch.cuda.amp.autocast()."""\n# torch.cuda.amp.autocast() is deprecated\n',
    )
    INVALID = (
        Invalid(
            "import torch\nwith torch.cuda.amp.autocast():\n    y = model(x)\n",
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\nwith torch.amp.autocast(device_type, dtype=torch.float16,'
            " enabled=torch.accelerator.is_available()):\n    y = model(x)\n",
        ),
        Invalid(
            "import torch\nwith torch.cuda.amp.autocast(dtype=torch.bfloat16, enabled=args.amp):\n    pass\n",
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\n'
            "with torch.amp.autocast(device_type, dtype=torch.bfloat16, enabled=args.amp and"
            " torch.accelerator.is_available()):\n    pass\n",
        ),
        Invalid(
            "import torch\n@torch.cuda.amp.autocast()\ndef forward(x):\n    return x\n",
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\n\n\n@torch.amp.autocast(device_type, dtype=torch.float16,'
            " enabled=torch.accelerator.is_available())\ndef forward(x):\n    return x\n",
        ),
        Invalid(
            "from torch.cuda.amp import autocast as ac\n\n@ac(enabled=False)\ndef loss(x):\n    return x\n",
            "import torch\n\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\n\n\n@torch.amp.autocast(device_type, enabled=False)\ndef loss(x):\n'
            "    return x\n",
        ),
        Invalid(
            "def step(m, x):\n    from torch.cuda.amp import autocast\n"
            "    with autocast(False, torch.float16):\n        return m(x)\n",
            "import torch\ndef step(m, x):\n"
            "    device_type = (torch.accelerator.current_accelerator(check_available=True)"
            ' or torch.device("cpu")).type\n'
            "    with torch.amp.autocast(device_type, dtype=torch.float16, enabled=False):\n"
            "        return m(x)\n",
        ),
        Invalid(
            "import torch\nif torch.cuda.is_available():\n"
            "    with torch.cuda.amp.autocast(cache_enabled=False):\n        pass\n",
            "import torch\nif torch.cuda.is_available():\n"
            "    device_type = (torch.accelerator.current_accelerator(check_available=True)"
            ' or torch.device("cpu")).type\n'
            "    with torch.amp.autocast(device_type, dtype=torch.float16, cache_enabled=False):\n"
            "        pass\n",
        ),
        Invalid(
            "import functools, torch\nctx = functools.partial(torch.cuda.amp.autocast, enabled=True)\n",
        ),
        Invalid(
            "import torch\nwith torch.cuda.amp.autocast(**amp_kwargs):\n    pass\n",
        ),
    )

    def fix_for(self, node: cst.CSTNode, call: cst.Call | None, name: str) -> FixSpec | None:
        bound = bind_arguments(call, self.PARAMS) if call is not None else None
        if bound is None:
            return None
        enabled = bound.get("enabled")
        overrides = {"enabled": enabled_value(self.ctx, enabled)}
        if "dtype" not in bound and not is_literal(enabled, "False"):
            overrides["dtype"] = CUDA_AUTOCAST_DTYPE
        args = [DEVICE_TYPE, *keyword_arguments(self.ctx, bound, self.ORDER, overrides)]
        new = f"torch.amp.autocast({', '.join(args)})"
        return FixSpec(
            "Use `torch.amp.autocast` on the current device (float16 as on CUDA, off without an "
            "accelerator as before)",
            (Replacement(call, new),),
            imports=("torch",),
            safety=rebuilt_safety(call),
        )


class CudaAmpGradScaler(QualifiedNameRule):
    """`torch.cuda.amp.GradScaler`.

    What it does
    Flags `torch.cuda.amp.GradScaler`, however it was imported: calls and other uses such as `isinstance`
    checks (not annotations: no rule looks inside one, since it runs no device code).

    Why it matters on Trainium
    A `torch.cuda.amp.GradScaler` disables itself when CUDA is missing, so on a `neuron` device float16
    training runs without loss scaling and small gradients underflow. `torch.amp.GradScaler(device_type)`
    scales on the device it is given.

    Example
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp)

    Use instead
    device_type = (torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")).type
    scaler = torch.amp.GradScaler(device_type, enabled=args.amp and torch.accelerator.is_available())

    Fix safety
    Safe: on CUDA the scaler is the same; without an accelerator it stays disabled (scale 1, `step` just
    steps), as the CUDA scaler was, because `torch.amp.GradScaler("cpu")` would be enabled. A call with
    `**kwargs`, or a class `isinstance` tests against, becomes `torch.amp.GradScaler` (the base class, whose
    default device is 'cuda'): NM205 then asks for the device. Other uses get no fix: `torch.amp.GradScaler`
    takes the device first, so a subclass, an alias called later or a call with `*args` would pass the
    initial scale as the device.
    """

    code = "NM202"
    name = "cuda-amp-gradscaler"
    message = (
        "`torch.cuda.amp.GradScaler` is CUDA-only and deprecated: use "
        "`torch.amp.GradScaler(device_type, ...)`"
    )
    severity = "error"
    fix_safety = "safe"
    triggers = (b"GradScaler",)
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {
        "torch.cuda.amp.GradScaler": None,
        "torch.cuda.amp.grad_scaler.GradScaler": None,
    }
    PARAMS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")
    VALID = (
        "import torch\nscaler = torch.amp.GradScaler('cuda')\n",
        "from torch.amp import GradScaler\nscaler = GradScaler('cpu', enabled=False)\n",
        # espnet's fallback for an old torch rebinds the name: no use of the CUDA scaler
        "try:\n    from torch.cuda.amp import GradScaler\nexcept ImportError:\n    GradScaler = None\n",
    )
    INVALID = (
        Invalid(
            "import torch\nscaler = torch.cuda.amp.GradScaler(enabled=args.amp)\n",
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\nscaler = torch.amp.GradScaler(device_type, enabled=args.amp and'
            " torch.accelerator.is_available())\n",
        ),
        Invalid(
            "from torch.cuda.amp import GradScaler\nscaler = GradScaler(2.0**10, growth_interval=100)\n",
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\nscaler = torch.amp.GradScaler(\n'
            "    device_type, init_scale=2.0**10, growth_interval=100,"
            " enabled=torch.accelerator.is_available()\n)\n",
        ),
        Invalid(
            "import torch\ndef train(scaler: torch.cuda.amp.GradScaler):\n"
            "    assert isinstance(scaler, torch.cuda.amp.GradScaler)\n",
            "import torch\ndef train(scaler: torch.cuda.amp.GradScaler):\n"
            "    assert isinstance(scaler, torch.amp.GradScaler)\n",
        ),
        Invalid(  # fairscale: `GradScaler(1024.0)` would pass the scale as the device
            "from torch.cuda.amp import GradScaler as TorchGradScaler\n"
            "class GradScaler(TorchGradScaler):\n    pass\nscaler = TorchGradScaler(*args)\n",
            count=2,
        ),
        Invalid(
            "from torch.cuda import amp\nscaler = amp.GradScaler(enabled=not args.fp32)\n",
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\n'
            "scaler = torch.amp.GradScaler(device_type, enabled=(not args.fp32) and"
            " torch.accelerator.is_available())\n",
        ),
    )

    def fix_for(self, node: cst.CSTNode, call: cst.Call | None, name: str) -> FixSpec | None:
        bound = bind_arguments(call, self.PARAMS) if call is not None else None
        if bound is None:
            # `torch.amp.GradScaler` takes the device first: a positional argument (`*args`), a subclass or
            # an alias called later (fairscale's `class GradScaler(TorchGradScaler)`, `GradScaler(1024.0)`)
            # would pass the initial scale as the device; only a class test keeps its meaning
            if call is not None and any(arg.star == "*" for arg in call.args):
                return None
            if call is None and not _class_test(self.ctx):
                return None
            return FixSpec(
                f"Replace `{name}` with `torch.amp.GradScaler`",
                (Replacement(node, "torch.amp.GradScaler"),),
                imports=("torch",),
            )
        overrides = {"enabled": enabled_value(self.ctx, bound.get("enabled"))}
        args = [DEVICE_TYPE, *keyword_arguments(self.ctx, bound, self.PARAMS, overrides)]
        return FixSpec(
            "Use `torch.amp.GradScaler` on the current device (disabled without an accelerator as before)",
            (Replacement(call, f"torch.amp.GradScaler({', '.join(args)})"),),
            imports=("torch",),
            safety=rebuilt_safety(call),
        )


class CudaAmpCustomFwd(QualifiedNameRule):
    """`torch.cuda.amp.custom_fwd` / `custom_bwd` on autograd Functions.

    What it does
    Flags `torch.cuda.amp.custom_fwd` and `custom_bwd`, bare (`@custom_bwd`) or called
    (`@custom_fwd(cast_inputs=torch.float32)`).

    Why it matters on Trainium
    They consult CUDA's autocast state only: under `neuron` autocast a `cast_inputs` Function no longer
    receives the float32 inputs it was written for, and backward does not run under the forward's autocast
    state. `torch.amp.custom_fwd` / `custom_bwd` take the device type as a required keyword.

    Example
    @staticmethod
    @torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x): ...

    Use instead
    @staticmethod
    @torch.amp.custom_fwd(device_type=device_type, cast_inputs=torch.float32)
    def forward(ctx, x): ...

    Fix safety
    Safe: on CUDA the decorators behave as before; elsewhere they follow the current device's autocast,
    which (after NM201/NM204) is off without an accelerator, as CUDA's was. The device type is evaluated when
    the decorator runs, at import time. Other uses (`f = torch.cuda.amp.custom_fwd`) are reported only.
    """

    code = "NM203"
    name = "cuda-amp-custom-fwd"
    message = "`torch.cuda.amp.{short}` is CUDA-only and deprecated: use `torch.amp.{short}(device_type=...)`"
    severity = "error"
    fix_safety = "safe"
    triggers = (b"custom_fwd", b"custom_bwd")
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {
        f"torch.cuda.amp{module}.{short}": None
        for module in ("", ".autocast_mode")
        for short in ("custom_fwd", "custom_bwd")
    }
    VALID = ("import torch\n@torch.amp.custom_bwd(device_type='cpu')\ndef backward(ctx, g):\n    return g\n",)
    INVALID = (
        Invalid(
            "import torch\nclass F(torch.autograd.Function):\n    @staticmethod\n"
            "    @torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)\n    def forward(ctx, x):\n"
            "        return x\n\n    @staticmethod\n    @torch.cuda.amp.custom_bwd\n"
            "    def backward(ctx, g):\n"
            "        return g\n",
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\n\n\nclass F(torch.autograd.Function):\n    @staticmethod\n'
            "    @torch.amp.custom_fwd(device_type=device_type, cast_inputs=torch.float32)\n"
            "    def forward(ctx, x):\n        return x\n\n    @staticmethod\n"
            "    @torch.amp.custom_bwd(device_type=device_type)\n    def backward(ctx, g):\n"
            "        return g\n",
            count=2,
        ),
        Invalid(
            "from torch.cuda.amp import custom_fwd\nforward = custom_fwd(raw_forward)\n",
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\n'
            "forward = torch.amp.custom_fwd(raw_forward, device_type=device_type)\n",
        ),
        Invalid(
            "import torch\nfwd = torch.cuda.amp.custom_fwd\n",
        ),
    )

    def fix_for(self, node: cst.CSTNode, call: cst.Call | None, name: str) -> FixSpec | None:
        short = name.rsplit(".", 1)[-1]
        device = f"device_type={DEVICE_TYPE}"
        if call is not None:
            positional = [self._arg(a) for a in call.args if a.keyword is None and a.star != "**"]
            keywords = [self._arg(a) for a in call.args if a.keyword is not None or a.star == "**"]
            target, new = call, f"torch.amp.{short}({', '.join([*positional, device, *keywords])})"
        elif isinstance(self.ctx.parent, cst.Decorator):
            target, new = node, f"torch.amp.{short}({device})"
        else:
            return None
        return FixSpec(
            f"Use `torch.amp.{short}` with the current device type",
            (Replacement(target, new),),
            imports=("torch",),
            safety=rebuilt_safety(target),
        )

    def _arg(self, arg: cst.Arg) -> str:
        value = self.ctx.code(arg.value)
        if arg.keyword is not None:
            return f"{arg.keyword.value}={value}"
        return f"{arg.star}{value}"


def _class_test(ctx) -> bool:
    """Whether the visited name is a class `isinstance` / `issubclass` tests against (alone or in a tuple)."""
    for node in reversed(ctx.stack[:-1]):
        if isinstance(node, cst.Call):
            return isinstance(node.func, cst.Name) and node.func.value in ("isinstance", "issubclass")
        if not isinstance(node, (cst.Arg, cst.Tuple, cst.Element)):
            return False
    return False
