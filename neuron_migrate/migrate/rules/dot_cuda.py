"""NM103: `x.cuda()` / `model.cuda(i)`."""

from __future__ import annotations

import re
from itertools import pairwise

import libcst as cst

from neuron_migrate.migrate.call_sites import calls_in
from neuron_migrate.migrate.device_flow import device_flow, is_device_name, is_index_name
from neuron_migrate.migrate.fixes import DEVICE, DEVICE_TYPE
from neuron_migrate.migrate.guards import conjuncts
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.names import dotted
from neuron_migrate.migrate.patterns import keyword, positional
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement, Rule
from neuron_migrate.migrate.walk import find, innermost_function


class DotCuda(Rule):
    """`.cuda()` on a tensor or module.

    What it does
    Flags calls of a `.cuda(...)` method: `x.cuda()`, `model.cuda(local_rank)`,
    `batch.cuda(non_blocking=True)`. A class that defines `cuda` or `to` itself keeps `self.cuda()` (its
    own method; a `.to()` there could call itself) for a person.

    Why it matters on Trainium
    `.cuda()` always means CUDA: on Trainium and on a CPU-only machine it raises "Torch not compiled with
    CUDA enabled". `.to(device)` with the current accelerator works on all three.

    Example
    model = model.cuda(local_rank)
    x = x.cuda(non_blocking=True)

    Use instead
    device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")
    model = model.to(torch.device(device.type, local_rank))
    x = x.to(device, non_blocking=True)

    Fix safety
    Safe for `.cuda()` (the current device, like `current_accelerator()`, which carries no index) and for an
    index that is an int literal or is named like one (`local_rank`, `gpu`, `i`, `*_id`): it becomes
    `torch.device(type, index)`, and `cpu:N` is a valid placement. Other keywords (`non_blocking`,
    `memory_format`) are kept. Unsafe when the argument's name does not say it is an index: a device
    variable becomes `.to(device)` (wrong if it holds an int), anything else `torch.device(type, value)`.
    No change for an object an `if` around the call finds on CUDA already (`if m.device.type == "cuda":
    m.cuda()`): the call moves nothing and runs for the object's own `cuda()` (bitsandbytes' re-quantizing
    `Int8Params.cuda()`), which `.to()` skips. A keyword `.cuda()` does not take (`device_id=`, torch 0.3's)
    is left for a person. A test that calls `.cuda()` and `.cpu()` as statements of their own tests the
    methods themselves (no change).
    The storage a `torch.load` `map_location` function receives (`lambda storage, loc: ...`, or a `def` the
    module passes so) gets `.to(device=...)`: `UntypedStorage.to()` takes the device as a keyword only.
    """

    code = "NM103"
    name = "dot-cuda"
    message = "`.cuda()` is CUDA-only: use `.to(device)` with the current accelerator"
    severity = "error"
    fix_safety = "safe"
    triggers = (b".cuda(",)
    VALID = (
        'import torch\nx = torch.ones(2).to("cpu")\nuse = torch.cuda.is_available()\n',
        "import torch\nv = torch.version.cuda\nflag = torch.backends.cuda.matmul.allow_tf32\n",
        "def f(x):\n    return x.cuda  # a reference, not a call\n",
        "import tvm\ndev = tvm.cuda(0)\n",
        '"""Call x.cuda() to move it."""\n# model.cuda()\n',
    )
    INVALID = (
        Invalid(
            "import torch\nmodel = torch.nn.Linear(2, 2).cuda()\nx = torch.ones(2).cuda(non_blocking=True)\n",
            "import torch\ndevice = torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")\nmodel = torch.nn.Linear(2, 2).to(device)\n'
            "x = torch.ones(2).to(device, non_blocking=True)\n",
            count=2,
        ),
        Invalid(
            "def place(model, batch, local_rank):\n    model = model.cuda(local_rank)\n"
            "    return model, [t.cuda(device=0) for t in batch]\n",
            "import torch\ndef place(model, batch, local_rank):\n"
            "    device_type = (torch.accelerator.current_accelerator(check_available=True)"
            ' or torch.device("cpu")).type\n    model = model.to(torch.device(device_type, local_rank))\n'
            "    return model, [t.to(device=torch.device(device_type, 0)) for t in batch]\n",
            count=2,
        ),
        Invalid(  # basicsr: a storage's `to()` takes the device as a keyword only
            "import io\nimport torch\nf = io.BytesIO()\ntorch.save(torch.ones(2), f)\nf.seek(0)\n"
            "x = torch.load(f, map_location=lambda s, loc: s.cuda(0))\n",
            "import io\nimport torch\nf = io.BytesIO()\ntorch.save(torch.ones(2), f)\nf.seek(0)\n"
            "device_type = (torch.accelerator.current_accelerator(check_available=True)"
            ' or torch.device("cpu")).type\n'
            "x = torch.load(f, map_location=lambda s, loc: s.to(device=torch.device(device_type, 0)))\n",
        ),
        Invalid(  # the same storage, in a function the module passes as `map_location`
            "import io\nimport torch\ndef to_gpu(s, loc):\n    return s.cuda(0)\n"
            "f = io.BytesIO()\ntorch.save(torch.ones(2), f)\nf.seek(0)\n"
            "x = torch.load(f, map_location=to_gpu)\n",
            "import io\nimport torch\ndef to_gpu(s, loc):\n"
            "    device_type = (torch.accelerator.current_accelerator(check_available=True)"
            ' or torch.device("cpu")).type\n'
            "    return s.to(device=torch.device(device_type, 0))\n"
            "f = io.BytesIO()\ntorch.save(torch.ones(2), f)\nf.seek(0)\n"
            "x = torch.load(f, map_location=to_gpu)\n",
        ),
        Invalid(  # ludwig: on CUDA already, `.cuda()` runs for bitsandbytes' re-quantization
            'def reload(model):\n    if model.device.type == "cuda":\n        model.cuda()\n',
        ),
        Invalid(  # controlnet_aux: `device_id=` was torch 0.3's keyword; today's `.cuda()` rejects it
            "def save(network, gpu_ids):\n    network.cuda(device_id=gpu_ids[0])\n",
        ),
        Invalid(  # the class's own `cuda`, called from its own `to`
            "class Index:\n    def cuda(self):\n        return self\n\n"
            "    def to(self, device):\n        return self.cuda()\n",
        ),
        Invalid(
            'import torch\ndevice = f"cuda:{rank}"\nif torch.cuda.is_available():\n    x = x.cuda().half()\n'
            "y = y.cuda(device)\nz = z.cuda(args.which)\n",
            'import torch\ndevice = f"cuda:{rank}"\n'
            "accelerator = torch.accelerator.current_accelerator(check_available=True) or "
            'torch.device("cpu")\n'
            "if torch.cuda.is_available():\n    x = x.to(accelerator).half()\ny = y.to(device)\n"
            "z = z.to(torch.device(accelerator.type, args.which))\n",
            count=3,
        ),
    )

    def _exercised(self, call: cst.Call) -> str | None:
        """The name of the test function the call is a statement of, when it only calls `.cuda()` (the result
        unused) and the test also makes a bare `.cpu()` call: it exercises the moves themselves (torchao's
        `test_device1_to_device2` calls `.to(device=...)`, `.to(...)`, `.cuda()` and `.cpu()` in turn,
        review 40 #180)."""
        stack = self.ctx.stack
        if len(stack) < 2 or not isinstance(stack[-2], cst.Expr):
            return None
        test = innermost_function(stack)
        if test is None or not test.name.value.startswith("test"):
            return None
        for statement in find(test, cst.Expr):
            value = statement.value
            moved = isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and not value.args
            if moved and value.func.attr.value == "cpu":
                return test.name.value
        return None

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """A `.cuda` attribute."""
        return "cuda" in lex.names

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "cuda":
            return
        if (self.ctx.qualified_name(func) or "").startswith("torch.") or self._on_module(func.value):
            return  # torch.Tensor.cuda(x) (unbound, rare); tvm.cuda(0), a module's own function

        own = self._own_method(func.value)
        storage = self._map_location_storage(func.value)
        exercised = self._exercised(node)

        def decide() -> None:
            if own is not None:
                self.report(
                    node,
                    self.message + f"; its class defines `{own}` itself, so `self.cuda()` is the class's "
                    f"own method (a `.to()` here would call its `{own}`): give the class a device-generic "
                    "method by hand",
                )
                return
            if exercised is not None:
                self.report(
                    node,
                    self.message,
                    no_change=f"the test `{exercised}` calls `.cuda()` itself, beside `.cpu()`: it tests the "
                    "method, which a `.to()` would no longer cover: no change needed",
                )
                return
            if (test := self._on_cuda_already(func.value)) is not None:
                self.report(
                    node,
                    self.message,
                    no_change=f"`{self.ctx.code(func.value)}` is on CUDA already here (`{test}`): this "
                    "`.cuda()` moves nothing and runs for what the object's own `cuda()` does (bitsandbytes "
                    "re-quantizes 8-bit weights), which `.to()` skips: no change needed",
                )
                return
            unknown = next(
                (a.keyword.value for a in node.args if a.keyword and a.keyword.value not in _KEYWORDS), None
            )
            if unknown is not None:  # controlnet_aux's `network.cuda(device_id=...)`, torch 0.3's spelling
                self.report(
                    node,
                    self.message + f"; `{unknown}=` is no argument of `.cuda()`: pass the device by hand",
                )
                return
            if any(arg.star for arg in node.args):  # `.cuda(*args)`: a device index may be in there
                self.report(node, self.message + "; its arguments are unpacked: pass the device by hand")
                return
            fix, note = self._fix(node, func, keyword_only=storage)
            self.report(node, self.message + note, fix)

        self.ctx.defer(decide)  # whether a name holds a device can be decided further down the file

    def _on_cuda_already(self, receiver: cst.BaseExpression) -> str | None:
        """The test of an `if` around the call that holds only when `receiver` is on CUDA already (one of its
        `and`-ed parts is `receiver.device.type == "cuda"` or `receiver.is_cuda`), as written; else None."""
        code = re.escape(self.ctx.code(receiver).strip())
        on_cuda = re.compile(rf"{code}\s*\.\s*(?:device\s*\.\s*type\s*==\s*['\"]cuda['\"]|is_cuda)")
        for node, below in pairwise(self.ctx.stack):
            if (
                isinstance(node, cst.If)
                and below is node.body
                and any(on_cuda.fullmatch(self.ctx.code(part).strip()) for part in conjuncts(node.test))
            ):
                return self.ctx.code(node.test).strip()
        return None

    def _own_method(self, receiver: cst.BaseExpression) -> str | None:
        """For `self.cuda()` in a class that defines `cuda` or `to` itself (gpytorch's `NNUtil`: a `to` that
        calls `self.cuda()`, a `cuda` that builds a faiss GPU index), the method's name."""
        if not (isinstance(receiver, cst.Name) and receiver.value == "self"):
            return None
        owner = next((n for n in reversed(self.ctx.stack) if isinstance(n, cst.ClassDef)), None)
        if owner is None or not isinstance(owner.body, cst.IndentedBlock):
            return None
        methods = {s.name.value for s in owner.body.body if isinstance(s, cst.FunctionDef)}
        return next((name for name in ("cuda", "to") if name in methods), None)

    def _on_module(self, receiver: cst.BaseExpression) -> bool:
        key = dotted(receiver) if isinstance(receiver, (cst.Name, cst.Attribute)) else None
        head = key.split(".")[0] if key else None
        return head is not None and self.ctx.scopes.imports(head)

    def _map_location_storage(self, receiver: cst.BaseExpression) -> bool:
        """Whether `receiver` is the storage a `torch.load` `map_location` function receives: its first
        parameter, in a lambda passed as `map_location=` or a `def` whose name the module passes so.
        `UntypedStorage.to()` takes the device as a keyword only."""
        function = next(
            (n for n in reversed(self.ctx.stack) if isinstance(n, (cst.Lambda, cst.FunctionDef))), None
        )
        if function is None or not isinstance(receiver, cst.Name):
            return False
        params = function.params.params
        if not params or params[0].name.value != receiver.value:
            return False
        if isinstance(function, cst.FunctionDef):
            return function.name.value in _map_location_functions(self.ctx)
        at = self.ctx.stack.index(function)
        holder = self.ctx.stack[at - 1] if at > 0 else None
        return _is_map_location(holder)

    def _fix(self, call: cst.Call, func: cst.Attribute, keyword_only: bool = False) -> tuple[FixSpec, str]:
        """The fix, and what a person must check when it is unsafe. `keyword_only`: the device goes in as
        `device=` (a storage's `to()`)."""
        arg = positional(call, 0) or keyword(call, "device")
        edits = [Replacement(func.attr, "to")]
        unsafe, note = False, ""
        if arg is None or (isinstance(arg.value, cst.Name) and arg.value.value == "None"):
            if arg is None:
                text = ("device=" if keyword_only else "") + DEVICE + (", " if call.args else "")
                edits.append(Replacement(call.whitespace_before_args, text))
            else:
                edits.append(Replacement(arg, _keep_keyword(arg, DEVICE, keyword_only)))
            title = "Replace `.cuda()` with `.to()` the current accelerator"
        else:
            key = dotted(arg.value) if isinstance(arg.value, (cst.Name, cst.Attribute)) else None
            index = self.ctx.code(arg.value).strip()
            if isinstance(arg.value, cst.Integer) or is_index_name(key):
                text = f"torch.device({DEVICE_TYPE}, {index})"
            elif is_device_name(key):
                text, unsafe = index, key not in device_flow(self.ctx).holders
                note = f"; check that `{index}` is a device, not an int index" if unsafe else ""
            else:
                text, unsafe = f"torch.device({DEVICE_TYPE}, {index})", True
                note = f"; check that `{index}` is a device index"
            edits.append(Replacement(arg, _keep_keyword(arg, text, keyword_only)))
            title = f"Replace `.cuda({index})` with `.to()` the current accelerator"
        return FixSpec(title, tuple(edits), imports=("torch",), safety="unsafe" if unsafe else None), note


#: the keyword arguments `Tensor.cuda()` and `Module.cuda()` take, which `.to()` takes too
_KEYWORDS = frozenset({"device", "non_blocking", "memory_format"})


def _keep_keyword(arg: cst.Arg, text: str, keyword_only: bool = False) -> str:
    return f"device={text}" if arg.keyword is not None or keyword_only else text


def _is_map_location(node: cst.CSTNode | None) -> bool:
    return isinstance(node, cst.Arg) and node.keyword is not None and node.keyword.value == "map_location"


def _map_location_functions(ctx) -> set[str]:
    """The names the module passes as `map_location=` to a `load(...)` call."""
    return {
        arg.value.value
        for site in calls_in(ctx).sites.get("load", ())
        for arg in site.stack[-1].args
        if _is_map_location(arg) and isinstance(arg.value, cst.Name)
    }
