"""NM204–NM205: the device-generic `torch.amp` API pinned to CUDA, by a 'cuda' string or by a default."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.migrate.amp import (
    bind_arguments,
    enabled_value,
    is_literal,
    keyword_arguments,
    rebuilt_safety,
)
from neuron_migrate.migrate.conditions import uses
from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.fixes import DEVICE_TYPE, DEVICE_TYPE_EXPR
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.names import dotted
from neuron_migrate.migrate.patterns import keyword, positional
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement, Rule

_DEV = DEVICE_TYPE_EXPR
_ON = "torch.accelerator.is_available()"
_AUTOCAST = {"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"}
_CUSTOM = {f"torch.amp{m}.custom_{d}" for m in ("", ".autocast_mode") for d in ("fwd", "bwd")}
_SCALER_PARAMS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")
_SHARDED_PARAMS = (
    "init_scale",
    "backoff_factor",
    "growth_factor",
    "growth_interval",
    "enabled",
    "process_group",
)
#: the scalers whose device defaults to CUDA, with their parameters after `device`, in order
_SCALERS = {
    "torch.GradScaler": _SCALER_PARAMS,
    "torch.amp.GradScaler": _SCALER_PARAMS,
    "torch.amp.grad_scaler.GradScaler": _SCALER_PARAMS,
    "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler": _SHARDED_PARAMS,
}
_SCALER = set(_SCALERS)
_USES_AUTOCAST = uses(_AUTOCAST, _CUSTOM)
_USES_SCALER = uses(_SCALER)


def device_first_call(
    rule: Rule, call: cst.Call, device_param: str, params: tuple[str, ...], overrides: dict[str, str | None]
) -> str | None:
    """`call` rewritten with the current device type as `device_param` (positional if it was, or absent) and
    its other arguments as keywords in `params` order, with `overrides` applied; None if `*args`/`**kw`."""
    bound = bind_arguments(call, (device_param, *params))
    if bound is None:
        return None
    as_keyword = keyword(call, device_param) is not None
    first = f"{device_param}={DEVICE_TYPE}" if as_keyword else DEVICE_TYPE
    rest = keyword_arguments(rule.ctx, bound, params, {device_param: None, **overrides})
    return f"{rule.ctx.code(call.func)}({', '.join([first, *rest])})"


#: what a function calls the tensor it works on, when it does not annotate it
_INPUT_NAMES = frozenset({"x", "input", "inputs", "hidden_states", "tensor", "t", "features", "qkv", "data"})


class AutocastCudaDevice(Rule):
    """`torch.autocast('cuda')` and other `torch.amp` calls whose device type is the string 'cuda'.

    What it does
    Flags `torch.autocast` / `torch.amp.autocast` with device type 'cuda' (positional or `device_type=`),
    and `torch.amp.custom_fwd` / `custom_bwd` with `device_type='cuda'`.

    Why it matters on Trainium
    Autocast for 'cuda' does nothing on a `neuron` device (it only warns that CUDA is missing), so the model
    silently trains in float32; `custom_fwd(device_type='cuda')` ignores `neuron` autocast.

    Example
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x)

    Use instead
    device_type = (torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")).type
    with torch.autocast(device_type, dtype=torch.bfloat16, enabled=torch.accelerator.is_available()):
        loss = model(x)

    An autocast turned off (`enabled=False`) inside a function that takes a tensor (annotated `Tensor`, or an
    unannotated first parameter named `x`, `inputs`, ...) is turned off on that tensor's device instead:
    `torch.autocast(x.device.type, enabled=False)`; in a method of a module that knows its device (a
    Lightning module, a Hugging Face model, a class with a `device` property returning a parameter's
    `.device`), on the module's: `torch.autocast(self.device.type, enabled=False)`.

    Fix safety
    Safe: on CUDA the call is unchanged in effect. CUDA autocast was off on a machine without CUDA, so the
    rewrite passes `enabled=... torch.accelerator.is_available()` (not under an existing availability check).
    No dtype is added: without one, autocast takes the device's current autocast dtype (`float16` on CUDA,
    unless an outer autocast or `torch.set_autocast_dtype` chose another: coqui's loss under the trainer's
    bf16 autocast), and a written `float16` would change that on CUDA. A call
    with `*args`/`**kwargs` only gets its device string replaced, as an unsafe fix: on a CPU-only machine
    that autocast is then on. For a project that supports a torch older than 2.5 the fix is unsafe: before
    2.5 an autocast raises for an MPS device (`enabled=False` too), where the CUDA one only warned on a Mac.
    """

    code = "NM204"
    name = "autocast-cuda-device"
    message = "autocast for 'cuda' is off on Trainium: use the current accelerator's device type"
    severity = "error"
    fix_safety = "safe"
    triggers = (b"autocast", b"custom_fwd", b"custom_bwd")
    ORDER = ("dtype", "enabled", "cache_enabled")
    VALID = (
        "import torch\nwith torch.autocast('cpu', dtype=torch.bfloat16):\n    pass\n",
        "import torch\nwith torch.autocast(device.type):\n    pass\n",
        "import torch\nwith torch.autocast('neuron'):\n    pass\n",
        "import torch\nlog.info('autocast on cuda')\n",
    )
    INVALID = (
        Invalid(
            "import torch\nwith torch.autocast('cuda'):\n    pass\n",
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\nwith torch.autocast(device_type,'
            " enabled=torch.accelerator.is_available()):\n    pass\n",
        ),
        Invalid(
            "from torch.amp import autocast\n@autocast(device_type='cuda', enabled=False)\ndef f(x):\n"
            "    return x\n",
            "import torch\nfrom torch.amp import autocast\n"
            "device_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\n\n\n@autocast(device_type=device_type, enabled=False)\ndef f(x):\n'
            "    return x\n",
        ),
        Invalid(
            "import torch\nwith torch.amp.autocast('cuda', torch.bfloat16, use_amp):\n    pass\n",
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\n'
            "with torch.amp.autocast(device_type, dtype=torch.bfloat16, enabled=use_amp and"
            " torch.accelerator.is_available()):\n    pass\n",
        ),
        Invalid(
            "import torch\n@torch.amp.custom_fwd(device_type='cuda', cast_inputs=torch.float32)\n"
            "def f(ctx, x):\n    return x\n",
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\n\n\n'
            "@torch.amp.custom_fwd(device_type=device_type, cast_inputs=torch.float32)\ndef f(ctx, x):\n"
            "    return x\n",
        ),
        Invalid(  # turned off for the data's device: the same on CUDA, and TorchScript compiles it
            "import torch\ndef norm(x: torch.Tensor):\n"
            "    with torch.autocast('cuda', enabled=False):\n        return x.float() / 2\n",
            "import torch\ndef norm(x: torch.Tensor):\n"
            "    with torch.autocast(x.device.type, enabled=False):\n        return x.float() / 2\n",
        ),
        Invalid(  # turned off for the module's device: where its methods compute
            "import torch\nfrom lightning import LightningModule\nclass Net(LightningModule):\n"
            "    def step(self, batch):\n        with torch.autocast('cuda', enabled=False):\n"
            "            return self.head(batch).float()\n",
            "import torch\nfrom lightning import LightningModule\nclass Net(LightningModule):\n"
            "    def step(self, batch):\n        with torch.autocast(self.device.type, enabled=False):\n"
            "            return self.head(batch).float()\n",
        ),
        Invalid(
            "import torch\nclass Diffusion(torch.nn.Module):\n    @property\n    def device(self):\n"
            "        return next(self.parameters()).device\n    def sample(self, n):\n"
            "        with torch.autocast('cuda', enabled=False):\n            return self.net(n)\n",
            "import torch\nclass Diffusion(torch.nn.Module):\n    @property\n    def device(self):\n"
            "        return next(self.parameters()).device\n    def sample(self, n):\n"
            "        with torch.autocast(self.device.type, enabled=False):\n            return self.net(n)\n",
        ),
        Invalid(
            "import torch\nwith torch.autocast('cuda', **kw):\n    pass\n",
            "import torch\n"
            "with torch.autocast((torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type, **kw):\n    pass\n',
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """The string 'cuda' and a use of `autocast` or the `torch.amp` custom_fwd / custom_bwd decorators."""
        return "cuda" in lex.strings and _USES_AUTOCAST(lex)

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.call_name(node)
        if name in _AUTOCAST:
            device = positional(node, 0) or keyword(node, "device_type")
        elif name in _CUSTOM:
            device = keyword(node, "device_type")
        else:
            return
        if device is None or string_value(device.value) != "cuda":
            return
        self.report(node, fix=self._fix(node, device, name in _AUTOCAST))

    def _fix(self, call: cst.Call, device: cst.Arg, is_autocast: bool) -> FixSpec:
        if is_autocast:
            bound = bind_arguments(call, ("device_type", *self.ORDER)) or {}
            enabled = bound.get("enabled")
            if is_literal(enabled, "False") and (data := self._data_holder()):
                return FixSpec(
                    f"Turn autocast off on the device of `{data}`",
                    (Replacement(device.value, f"{data}.device.type"),),
                )
            overrides = {"enabled": enabled_value(self.ctx, enabled)}
            new = device_first_call(self, call, "device_type", self.ORDER, overrides)
            if new is not None:
                return FixSpec(
                    "Autocast on the current device (off without an accelerator as before)",
                    (Replacement(call, new),),
                    imports=("torch",),
                    safety=rebuilt_safety(call),
                )
        safety = "unsafe" if is_autocast else None
        return FixSpec(
            "Use the current device type",
            (Replacement(device.value, DEVICE_TYPE),),
            imports=("torch",),
            safety=safety,
        )

    def _data_holder(self) -> str | None:
        """What holds the data the code around the call (not a decorator) computes on, by name: the function's
        tensor parameter (the first one annotated `Tensor`, else, with no annotations, a first parameter named
        as inputs are: `x`, `input`, `hidden_states`, ...), or `self` in a method of a module that knows its
        device (a Lightning module, a Hugging Face model, a class with a `device` property that returns a
        value's `.device`, such as `next(self.parameters()).device`). Autocast turned off on the data's own
        device is what the code means, on every device, and TorchScript compiles it (it compiles no
        `torch.accelerator` call)."""
        stack = self.ctx.stack
        if any(isinstance(node, cst.Decorator) for node in stack):
            return None
        at = next((i for i in range(len(stack) - 1, -1, -1) if isinstance(stack[i], cst.FunctionDef)), None)
        if at is None:
            return None
        params = list(stack[at].params.params)
        method = bool(params) and params[0].name.value in ("self", "cls")
        inputs = params[1:] if method else params
        for param in inputs:
            annotation = dotted(param.annotation.annotation) if param.annotation else None
            if annotation is not None and annotation.rsplit(".", 1)[-1] == "Tensor":
                return param.name.value
        if inputs and all(p.annotation is None for p in inputs) and inputs[0].name.value in _INPUT_NAMES:
            return inputs[0].name.value
        owner = stack[at - 2] if at >= 2 else None
        if method and params[0].name.value == "self" and isinstance(owner, cst.ClassDef):
            bases = (self.ctx.qualified_name(base.value) or "" for base in owner.bases)
            if any(base in _DEVICE_AWARE_BASES for base in bases) or _device_property(owner):
                return "self"
        return None


#: base classes whose instances have a `device` attribute (a `torch.device`: where their parameters are)
_DEVICE_AWARE_BASES = frozenset(
    {
        "lightning.LightningModule",
        "lightning.pytorch.LightningModule",
        "lightning.pytorch.core.LightningModule",
        "lightning.pytorch.core.module.LightningModule",
        "pytorch_lightning.LightningModule",
        "pytorch_lightning.core.LightningModule",
        "pytorch_lightning.core.module.LightningModule",
        "transformers.PreTrainedModel",
        "transformers.modeling_utils.PreTrainedModel",
    }
)


def _device_property(owner: cst.ClassDef) -> bool:
    """Whether class `owner` defines a `device` property that returns some value's `.device`."""
    for statement in owner.body.body:
        if not (isinstance(statement, cst.FunctionDef) and statement.name.value == "device"):
            continue
        if not any(dotted(d.decorator) == "property" for d in statement.decorators):
            return False
        body = statement.body.body
        returned = body[-1].body[0] if body and isinstance(body[-1], cst.SimpleStatementLine) else None
        return (
            isinstance(returned, cst.Return)
            and isinstance(returned.value, cst.Attribute)
            and returned.value.attr.value == "device"
        )
    return False


class GradScalerDefaultDevice(Rule):
    """`torch.amp.GradScaler()` without a device, or with device 'cuda'.

    What it does
    Flags `torch.amp.GradScaler` (also `torch.GradScaler`, and FSDP's `ShardedGradScaler`) calls that pass no
    device (the default is 'cuda') or pass the string 'cuda'.

    Why it matters on Trainium
    A scaler for 'cuda' disables itself when CUDA is missing, so float16 training on `neuron` runs with no
    loss scaling and small gradients underflow to zero.

    Example
    scaler = torch.amp.GradScaler(enabled=use_amp)

    Use instead
    device_type = (torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")).type
    scaler = torch.amp.GradScaler(device_type, enabled=use_amp and torch.accelerator.is_available())

    Fix safety
    Safe: on CUDA the scaler is the same; a 'cuda' scaler was disabled without CUDA, and a scaler for "cpu"
    would be enabled, so the rewrite passes `enabled=... torch.accelerator.is_available()` (not under an
    existing availability check). A 'cuda' scaler built with `*args`/`**kwargs` is reported without a fix;
    without a visible device such a call is not reported (the device may be among the unpacked arguments).
    """

    code = "NM205"
    name = "gradscaler-default-device"
    message = (
        "`GradScaler` defaults to device 'cuda' and is disabled on Trainium: pass the current device type"
    )
    severity = "warning"
    fix_safety = "safe"
    triggers = (b"GradScaler",)
    VALID = (
        "import torch\nscaler = torch.amp.GradScaler(device.type)\n",
        "import torch\nscaler = torch.amp.GradScaler('cpu', enabled=False)\n",
        "import torch\nscaler = torch.amp.GradScaler(**scaler_kwargs)\n",
        "import torch\nscaler = torch.amp.GradScaler(*args)\n",
    )
    INVALID = (
        Invalid(
            "import torch\nscaler = torch.amp.GradScaler()\n",
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\n'
            "scaler = torch.amp.GradScaler(device_type, enabled=torch.accelerator.is_available())\n",
        ),
        Invalid(
            "from torch.amp import GradScaler\n"
            "scaler = GradScaler('cuda', init_scale=1024, enabled=cfg.fp16)\n",
            "import torch\nfrom torch.amp import GradScaler\n"
            "device_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\n'
            "scaler = GradScaler(device_type, init_scale=1024, enabled=cfg.fp16 and"
            " torch.accelerator.is_available())\n",
        ),
        Invalid(
            "import torch\nif torch.accelerator.is_available():\n"
            "    scaler = torch.GradScaler(device='cuda')\n",
            "import torch\nif torch.accelerator.is_available():\n"
            "    device_type = (torch.accelerator.current_accelerator(check_available=True)"
            ' or torch.device("cpu")).type\n    scaler = torch.GradScaler(device=device_type)\n',
        ),
        Invalid(
            "import torch\nscaler = torch.amp.GradScaler('cuda', *rest)\n",
        ),
        Invalid(
            "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n"
            "fp16 = True\nscaler = ShardedGradScaler() if fp16 else None\n",
            "import torch\nfrom torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n"
            "fp16 = True\nscaler = (\n    ShardedGradScaler(\n"
            "        (torch.accelerator.current_accelerator(check_available=True)"
            ' or torch.device("cpu")).type,\n'
            "        enabled=torch.accelerator.is_available(),\n    )\n    if fp16\n    else None\n)\n",
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """A use of `GradScaler` (its default device is CUDA)."""
        return _USES_SCALER(lex)

    def visit_Call(self, node: cst.Call) -> None:
        params = _SCALERS.get(self.ctx.call_name(node) or "")
        if params is None:
            return
        device = positional(node, 0) or keyword(node, "device")
        if device is None and any(arg.star for arg in node.args):
            return  # the device may be among the unpacked arguments
        if device is not None and string_value(device.value) != "cuda":
            return
        bound = bind_arguments(node, ("device", *params)) or {}
        new = device_first_call(
            self, node, "device", params, {"enabled": enabled_value(self.ctx, bound.get("enabled"))}
        )
        fix = (
            None
            if new is None
            else FixSpec(
                "Scale on the current device (disabled without an accelerator as before)",
                (Replacement(node, new),),
                imports=("torch",),
                safety=rebuilt_safety(node),
            )
        )
        self.report(node, fix=fix)
