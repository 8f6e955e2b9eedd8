"""What `neuron-migrate trace` can run: a build function, a script, or a tiny Hugging Face model.

Target forms (`TargetSpec.parse`):

- `package.module:function` or `path/to/file.py:function` — a *build function*. It is called with the default
  device set to the trace device (`with torch.device(dev)`), and with `device=dev` if it has a parameter named
  `device`, and returns either a dict `{"model", "inputs", "loss_fn"?, "optimizer"?}` or a tuple
  `(model, inputs[, loss_fn[, optimizer]])`. `inputs` is a tensor (`model(inputs)`), a tuple/list
  (`model(*inputs)`) or a dict (`model(**inputs)`). `loss_fn(output) -> scalar tensor`; without it the loss is
  `output.loss` (Hugging Face outputs), else the sum of the first tensor in the output. `optimizer` defaults
  to `torch.optim.AdamW(model.parameters())`. The tracer records one step: forward (model + loss), backward,
  optimizer step; only the forward with `--inference`. Model construction is not recorded.
- `path/to/script.py` (plus its own arguments after `--`) — run as `__main__`; the whole run is recorded.
- `--hf MODEL_TYPE` — a random-weight transformers model built from a tiny config that `opdb.hf_tiny` derives
  from the config class's own defaults (plus `hf_overrides.json`, then `--hf-config`), no downloads.

This module is imported by the CLI (parsing only) and by the child process (building and running).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuron_migrate.errors import TargetError, UsageError

HF_BATCH = (2, 16)  # token ids per step: batch x sequence length (opdb.hf_tiny.BATCH)

_FUNC_RE = re.compile(r"^(?P<mod>[\w.]+|.+\.py):(?P<func>[A-Za-z_]\w*)$")


@dataclass(frozen=True)
class TargetSpec:
    """One thing to trace. `kind` is "function" | "script" | "hf"."""

    kind: str
    ref: str  # module:function, file.py:function, script path, or model type
    args: tuple[str, ...] = ()  # script arguments
    hf_config: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """How results name the target."""
        if self.kind == "hf":
            extra = ",".join(f"{k}={v}" for k, v in self.hf_config.items())
            return f"hf:{self.ref}" + (f"[{extra}]" if extra else "")
        return " ".join((self.ref, *self.args))

    @staticmethod
    def parse(
        target: str | None, args: tuple[str, ...] = (), hf: str | None = None, hf_config: str | None = None
    ) -> TargetSpec:
        """Build a spec from CLI values; bad combinations raise UsageError with the fix."""
        if hf:
            if target:
                raise UsageError(f"give either a TARGET ({target!r}) or --hf {hf}, not both")
            return TargetSpec("hf", hf, (), parse_hf_config(hf_config))
        if hf_config:
            raise UsageError("--hf-config only applies with --hf MODEL_TYPE")
        if not target:
            raise UsageError(
                "nothing to trace: give TARGET (module:function, file.py:function or script.py) or --hf"
            )
        if _FUNC_RE.match(target) and not target.endswith(".py"):
            if args:
                raise UsageError(
                    f"arguments after -- only apply to scripts, not to the build function {target}"
                )
            return TargetSpec("function", target)
        if target.endswith(".py"):
            if not Path(target).is_file():
                raise UsageError(
                    f"{target}: no such script; give a path to a .py file relative to this directory"
                )
            return TargetSpec("script", target, tuple(args))
        raise UsageError(
            f"{target!r} is not a target: use package.module:function, path/file.py:function, a script.py, "
            "or --hf MODEL_TYPE"
        )


def parse_hf_config(text: str | None) -> dict[str, Any]:
    """`hidden_size=8192,tie_word_embeddings=false` -> {'hidden_size': 8192, 'tie_word_embeddings': False}."""
    result: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise UsageError(
                f"--hf-config: {item!r} is not KEY=VALUE; write e.g. --hf-config hidden_size=128"
            )
        result[key.strip()] = _value(value.strip())
    return result


def _value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


# --- building (child process only: these import torch and user code) --------------------------------------


@dataclass
class Workload:
    """A model step to trace: the model, its inputs, how to get a loss, and the optimizer (None = AdamW)."""

    model: Any
    inputs: Any
    loss_fn: Any = None
    optimizer: Any = None


def load_function(ref: str) -> Any:
    """Import `module:function` or `file.py:function`; a missing module or name is a TargetError."""
    where, _, name = ref.rpartition(":")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise TargetError(f"{where}: no such file; give the path relative to this directory")
        sys.path.insert(0, str(path.resolve().parent))  # so the file's sibling imports work, as for a script
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as err:
            raise TargetError(
                f"{ref}: cannot import {err.name!r}; run from the project root or use path/file.py:{name}"
            ) from None
    func = getattr(module, name, None)
    if not callable(func):
        raise TargetError(f"{ref}: {where} has no function {name!r}")
    return func


def build_function(ref: str, device: Any) -> Workload:
    """Call a build function under the trace device and normalise what it returns."""
    import torch

    func = load_function(ref)
    kwargs = {"device": device} if "device" in inspect.signature(func).parameters else {}
    with torch.device(device):
        built = func(**kwargs)
    if isinstance(built, dict) and "model" in built and "inputs" in built:
        work = Workload(built["model"], built["inputs"], built.get("loss_fn"), built.get("optimizer"))
    elif isinstance(built, (tuple, list)) and 2 <= len(built) <= 4:
        work = Workload(*built)
    else:
        raise TargetError(
            f"{ref} returned {type(built).__name__}; return (model, inputs[, loss_fn[, optimizer]]) "
            "or a dict with 'model' and 'inputs'"
        )
    if not isinstance(work.model, torch.nn.Module):
        raise TargetError(f"{ref}: the model is a {type(work.model).__name__}, not a torch.nn.Module")
    work.model = _model_to(work.model, device)
    work.inputs = _to_device(work.inputs, device)
    return work


def _model_to(model: Any, device: Any) -> Any:
    # Only move what is elsewhere: `.to()` on parameters already on the device fails under FakeTensorMode.
    import torch

    kind = torch.device(device).type
    tensors = [*model.parameters(), *model.buffers()]
    return model.to(device) if any(t.device.type != kind for t in tensors) else model


def _to_device(value: Any, device: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value if value.device.type == torch.device(device).type else value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    return value


def hf_config_kwargs(model_type: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The fixed config values of a tiny `model_type` (hf_overrides.json, then the user's); the rest is
    derived from the config class's own defaults by `opdb.hf_tiny`."""
    from neuron_migrate.opdb import hf_tiny

    return hf_tiny.requested(model_type, overrides)


def build_hf(model_type: str, overrides: dict[str, Any], device: Any) -> Workload:
    """A random-weight transformers model from a tiny config (no downloads) with a (2, 16) batch of token ids;
    the config comes from `opdb.hf_tiny`, model and inputs from `opdb.hf_inputs`, which the fleet builds with
    too."""
    try:
        import transformers
    except ImportError:
        raise TargetError("--hf needs transformers: pip install 'neuron-migrate[hf]'") from None
    from neuron_migrate.opdb import hf_inputs

    if model_type not in transformers.CONFIG_MAPPING:
        raise TargetError(
            f"--hf {model_type}: transformers {transformers.__version__} has no such model_type "
            "(e.g. llama, gpt2, qwen2, mistral, gemma, t5)"
        )
    model, inputs = hf_inputs.build(model_type, overrides, device)
    return Workload(_model_to(model, device), inputs)
