"""NM304: backend maps keyed by device type with a 'cuda' key and no entry for the current accelerator
(`{'cuda': 'nccl'}`)."""

from __future__ import annotations

import re
from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.conditions import any_string
from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.fixes import DEVICE_TYPE
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.patterns import indentation
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement, Rule


class CudaBackendMap(Rule):
    """A dict that maps device types to distributed backends with a 'cuda' key (`{'cuda': 'nccl'}`).

    What it does
    Flags dict displays with a `'cuda'` key whose value is a backend name (nccl, gloo, mpi, ucc) and no
    entry for the current accelerator (a `'neuron'` key is one).

    Why it matters on Trainium
    Code looks the backend up by device type (`BACKENDS[device.type]`): with a `neuron` device that is a
    KeyError.

    Example
    BACKENDS = {"cpu": "gloo", "cuda": "nccl"}

    Use instead
    BACKENDS = {device.type: dist.Backend.default_device_backend_map.get(device.type), "cpu": "gloo",
                "cuda": "nccl"}

    Fix safety
    Safe: the new entry comes first, so every existing key keeps its value (on CUDA and on a CPU-only
    machine the dict is unchanged); the accelerator's entry is the backend torch registered for it, or None
    for a device without one (no error while building the dict). Unsafe when the module reads the map's
    values back (`BACKENDS.items()`, `.values()`): a device found by its backend would be the accelerator's
    where it shares one with another key (MPS and CPU both use gloo).
    """

    code = "NM304"
    name = "cuda-backend-map"
    message = "backend map keyed by 'cuda' misses the current accelerator: add an entry for its device type"
    severity = "warning"
    fix_safety = "safe"
    # the backend names as they appear in the dict's values ("ucc"/"mpi" only quoted: they hide in words)
    triggers = (b"nccl", b"NCCL", b"gloo", b"'mpi'", b'"mpi"', b"'ucc'", b'"ucc"')
    BACKENDS: ClassVar[set[str]] = {"nccl", "gloo", "mpi", "ucc"}
    VALUE = f"torch.distributed.Backend.default_device_backend_map.get({DEVICE_TYPE})"
    VALID = (
        "RUN_META = {'accelerator': 'cuda', 'precision': 'fp16'}\n",
        "names = {'cuda': 'NVIDIA GPU', 'cpu': 'host'}\n",
        "import torch\nbackends = {'cpu': 'gloo'}\n",
        "BACKENDS = {'cuda': 'nccl', 'cpu': 'gloo', 'neuron': 'neuron'}\n",
    )
    INVALID = (
        Invalid(
            "BACKENDS = {'cpu': 'gloo', 'cuda': 'nccl'}\n",
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            " torch.device('cpu')).type\nBACKENDS = {\n    device_type:"
            " torch.distributed.Backend.default_device_backend_map.get(device_type), 'cpu':"
            " 'gloo', 'cuda': 'nccl'\n}\n",
        ),
        Invalid(
            "import torch\nBACKENDS = {\n    'cuda': 'NCCL',\n    **EXTRA,\n}\n",
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\nBACKENDS = {\n    device_type:'
            " torch.distributed.Backend.default_device_backend_map.get(device_type),\n    'cuda': 'NCCL',\n"
            "    **EXTRA,\n}\n",
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """The string 'cuda' (a key) and a backend name (a value)."""
        return "cuda" in lex.strings and any_string(lex, lambda s: s.lower() in cls.BACKENDS)

    def visit_Dict(self, node: cst.Dict) -> None:
        keyed = [e for e in node.elements if isinstance(e, cst.DictElement)]
        cuda = [
            e
            for e in keyed
            if string_value(e.key) == "cuda" and (string_value(e.value) or "").lower() in self.BACKENDS
        ]
        if not cuda or any(
            (string_value(e.key) is None and _names_device(self.ctx.code(e.key)))
            or string_value(e.key) == "neuron"
            for e in keyed
        ):
            return  # a computed key for the current device, or one for `neuron`, is there already
        first = node.elements[0]
        if not isinstance(first, cst.DictElement):
            self.report(cuda[0])
            return
        whitespace = node.lbrace.whitespace_after
        separator = " "
        if isinstance(whitespace, cst.ParenthesizedWhitespace):
            separator = "\n" + indentation(self.ctx) + whitespace.last_line.value
        entry = f"{DEVICE_TYPE}: {self.VALUE},{separator}{self.ctx.code(first.key)}"
        read_back = self._read_back()
        self.report(
            cuda[0],
            self.message
            + (
                f"; the module looks devices up by backend (`{read_back}`): the new entry comes first, so an "
                "accelerator that shares a backend with another key (MPS uses gloo, like CPU) is found "
                "instead of that key: check those lookups"
                if read_back
                else ""
            ),
            fix=FixSpec(
                "Add an entry for the current accelerator",
                (Replacement(first.key, entry),),
                imports=("torch",),
                safety="unsafe" if read_back else None,
            ),
        )

    def _read_back(self) -> str | None:
        """For a map assigned to a name or attribute, the first place the module reads its values back
        (`_DIST_BACKEND.items()`, `.values()`)."""
        assign = self.ctx.stack[-2] if len(self.ctx.stack) > 1 else None
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            return None
        target = assign.targets[0].target
        name = target.attr.value if isinstance(target, cst.Attribute) else getattr(target, "value", None)
        if not isinstance(name, str):
            return None
        found = re.search(rf"\b{re.escape(name)}\s*\.\s*(?:items|values)\s*\(\s*\)", self.ctx.source)
        return found.group(0) if found else None


def _names_device(code: str) -> bool:
    return "accelerator" in code or "device" in code
