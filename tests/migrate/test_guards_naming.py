"""The shared analyses behind the fixes: the guard analysis (is an accelerator certain here?), old-torch
fallbacks, naming the device once, and where a new binding goes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from neuron_migrate.migrate.cautions import MEMORY_ON_MPS_FROM
from neuron_migrate.migrate.layout import Layout

from .helpers import findings, fixed

SYNC = ("NM401",)


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nif torch.cuda.is_available():\n    torch.cuda.synchronize()\n",
        "import torch\nif not torch.cuda.is_available():\n    pass\nelse:\n    torch.cuda.synchronize()\n",
        "import torch\ndef f():\n    if not torch.cuda.is_available():\n        return\n"
        "    torch.cuda.synchronize()\n",
        "import torch\ndef f():\n    if torch.cuda.device_count() == 0:\n        raise SystemExit('no gpu')\n"
        "    torch.cuda.synchronize()\n",
        "import torch\ndef f():\n    assert torch.accelerator.is_available()\n    torch.cuda.synchronize()\n",
        "import torch\nif x.device.type != 'cpu':\n    torch.cuda.synchronize()\n",
        "import torch\nif model.device != torch.device('cpu'):\n    torch.cuda.synchronize()\n",  # stable-ts
        # what NM105 writes: a test that lets neuron in beside CUDA
        "import torch\nif x.device.type in ('cuda', 'neuron'):\n    torch.cuda.synchronize()\n",
        "import torch\nif not device.startswith(('cuda:', 'neuron:')):\n    pass\nelse:\n"
        "    torch.cuda.synchronize()\n",
        "import torch\nuse = args.amp and torch.cuda.is_available()\nif use:\n    torch.cuda.synchronize()\n",
        "import torch\nok = torch.cuda.is_available() and x.is_cuda and torch.cuda.synchronize()\n",
        # a flag only raised where an accelerator is certain (torch/_dynamo/repro/aoti.py)
        "import torch\ndef f(args):\n    need_sync = False\n    for arg in args:\n"
        "        if isinstance(arg, torch.Tensor) and arg.is_cuda:\n            need_sync = True\n"
        "            break\n    if need_sync:\n        torch.cuda.synchronize()\n",
    ],
)
def test_no_guard_where_an_accelerator_is_certain(source):
    after = fixed(source, SYNC)
    assert "torch.accelerator.synchronize()" in after
    assert after.count("is_available()") == source.count("is_available()"), after


@pytest.mark.parametrize(
    "source",
    [
        "import torch\ntorch.cuda.synchronize()\n",
        "import torch\nif torch.cuda.is_available():\n    pass\ntorch.cuda.synchronize()\n",
        "import torch\nif not torch.cuda.is_available():\n    torch.cuda.synchronize()\n",
        "import torch\nif torch.cuda.is_available():\n    def later():\n        torch.cuda.synchronize()\n",
        # a flag also raised where an accelerator is only possible
        "import torch\ndef f(args, force):\n    need_sync = False\n    if force:\n        need_sync = True\n"
        "    for arg in args:\n        if arg.is_cuda:\n            need_sync = True\n"
        "    if need_sync:\n        torch.cuda.synchronize()\n",
    ],
)
def test_guard_where_an_accelerator_is_only_possible(source):
    after = fixed(source, SYNC)
    assert "if torch.accelerator.is_available():\n" in after.replace("    if", "if"), after


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nif hasattr(torch, 'accelerator'):\n    torch.accelerator.synchronize()\nelse:\n"
        "    torch.cuda.synchronize()\n",
        "import torch\ntry:\n    torch.accelerator.synchronize()\nexcept AttributeError:\n"
        "    torch.cuda.synchronize()\n",
        "import torch\ns = torch.Stream() if _is_torch_greater_or_equal_than_2_7 else torch.cuda.Stream()\n",
        "import torch\nif version.parse(torch.__version__) < version.parse('2.6'):\n"
        "    torch.cuda.synchronize()\n",
        # DeepSpeed: the code after a probe of an API torch 2.4 added runs on an older torch still
        "import torch\ndef dtype(device_type):\n    if hasattr(torch, 'get_autocast_dtype'):\n"
        "        return torch.get_autocast_dtype(device_type)\n    torch.cuda.synchronize()\n",
    ],
)
def test_old_torch_fallbacks_keep_their_cuda_calls(source):
    assert fixed(source, ("NM401", "NM406")) == source


def test_an_except_around_a_newer_device_generic_api_is_an_old_torch_fallback():
    """open_clip: `try: torch.amp.GradScaler(device=device)` / `except (AttributeError, TypeError):
    torch.cuda.amp.GradScaler()`: the handler runs on a torch without that API, where the rewrite to
    `torch.amp.GradScaler(device_type, ...)` would raise again."""
    source = (
        "import torch\ndef make(device):\n    try:\n        scaler = torch.amp.GradScaler(device=device)\n"
        "    except (AttributeError, TypeError):\n        scaler = torch.cuda.amp.GradScaler()\n"
        "    return scaler\n"
    )
    assert fixed(source) == source
    (finding,) = findings(source)
    assert "in a fallback for a torch without `torch.accelerator`: no change needed" in finding.message


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nif is_torch_version('>=', '2.3'):\n    torch.cuda.synchronize()\n",
        # funasr's amp shim: the branch runs wherever `torch.amp.GradScaler` exists, torch 2.3 on
        "import torch\ntorch_amp = getattr(torch, 'amp', None)\n"
        "if torch_amp is not None and hasattr(torch_amp, 'GradScaler'):\n"
        "    def autocast(enabled=True):\n        return torch.amp.autocast('cuda', enabled=enabled)\n",
    ],
)
def test_a_branch_for_an_older_torch_only_gets_what_that_torch_has(source):
    """The body of a test for torch >= 2.3 runs on torch 2.3 to 2.6 too, where `torch.accelerator` (2.6)
    and `current_accelerator(check_available=True)` (2.7) are missing: a fix there would raise on CUDA."""
    assert fixed(source) == source
    held = [f for f in findings(source) if "this code runs from torch 2.3 on" in f.message]
    assert held and all(f.fix is None for f in held)
    newer = source.replace("'2.3'", "'2.9'")
    if newer != source:
        assert "torch.accelerator.synchronize()" in fixed(newer)


def test_a_newer_version_test_is_not_a_fallback():
    source = (
        "import torch\nif is_torch_greater_or_equal('2.12'):\n    pass\nelse:\n    s = torch.cuda.Stream()\n"
    )
    assert "torch.Stream()" in fixed(source, ("NM406",))
    probe = "import torch\nif hasattr(torch, 'compile'):\n    pass\nelse:\n    s = torch.cuda.Stream()\n"
    assert "torch.Stream()" in fixed(probe, ("NM406",))


def test_the_device_is_named_once_per_function_and_reused():
    source = (
        "import torch\ndef main(args):\n    model = Net().cuda()\n    x = torch.zeros(2, device='cuda')\n"
        "    return model(x.to('cuda'))\n"
    )
    after = fixed(source, ("NM101", "NM103"))
    assert after.count("current_accelerator(") == 1
    assert (
        '    device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")\n'
        "    model = Net().to(device)\n" in after
    )
    assert "torch.zeros(2, device=device)" in after and "x.to(device)" in after


_TESTS = (
    '"""Tests."""\nimport torch\nfrom package import step\n\n\ndef test_step():\n'
    "    w = torch.randn(3).cuda()\n    step(w)\n\n\ndef test_two():\n"
    "    w = torch.randn(3).cuda()\n    v = torch.zeros(3, device='cuda')\n    step(w, v)\n"
)


def test_a_test_module_names_the_device_once_at_its_top():
    """Several tests each needing the idiom share one module-level name (schedulefree's tests, review 42)."""
    after = fixed(_TESTS, ("NM101", "NM103"), path="tests/test_step.py")
    assert after.count("current_accelerator(") == 1
    assert (
        "from package import step\n\n\n"
        'DEVICE = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")\n\n\n'
        "def test_step():\n    w = torch.randn(3).to(DEVICE)\n" in after
    )
    assert "    w = torch.randn(3).to(DEVICE)\n    v = torch.zeros(3, device=DEVICE)\n" in after


def test_a_library_module_names_the_device_per_function():
    """A module-level device would ask the CUDA driver at import, which forbids forked workers CUDA."""
    after = fixed(_TESTS, ("NM101", "NM103"), path="package/steps.py")
    assert "DEVICE" not in after and after.count("current_accelerator(") == 2
    assert "    device = torch.accelerator.current_accelerator(" in after


def test_a_test_module_name_already_taken_is_not_reused():
    source = _TESTS.replace("from package import step\n", "from package import step\nDEVICE = 'gpu0'\n")
    after = fixed(source, ("NM101", "NM103"), path="test_step.py")
    assert "from package import step\nACCELERATOR = torch.accelerator" in after and "DEVICE = 'gpu0'" in after
    assert "torch.randn(3).to(ACCELERATOR)" in after


def test_one_test_needing_the_device_keeps_it_in_the_test():
    source = _TESTS.split("\n\n\ndef test_two")[0] + "\n"
    after = fixed(source, ("NM103",), path="test_step.py")
    assert "DEVICE" not in after and ".to(torch.accelerator.current_accelerator(" in after


def test_an_existing_device_name_is_reused_not_rebound():
    source = (
        "import torch\ndef main():\n"
        "    device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "    x = torch.ones(2).cuda()\n    y = torch.zeros(2, device='cuda')\n"
    )
    after = fixed(source, ("NM101", "NM103", "NM105"))
    assert after.count("current_accelerator(") == 1
    assert "x = torch.ones(2).to(device)" in after and "device=device)" in after


def test_a_name_the_function_uses_is_not_taken():
    source = "import torch\ndef place(model, device, rank):\n    a = model.cuda()\n    b = model.cuda(rank)\n"
    after = fixed(source, ("NM103",))
    assert "accelerator = torch.accelerator.current_accelerator(" in after
    assert "torch.device(accelerator.type, rank)" in after


def test_the_binding_goes_above_the_first_use_in_the_block_holding_every_use():
    source = (
        "import os\nimport torch\ndef main():\n    os.environ['CUDA_VISIBLE_DEVICES'] = '0'\n"
        "    if a:\n        x = x.cuda()\n    else:\n        y = y.cuda()\n"
    )
    after = fixed(source, ("NM103",))
    lines = after.splitlines()
    binding = next(i for i, line in enumerate(lines) if "current_accelerator(" in line)
    assert lines[binding - 1].endswith("= '0'") and lines[binding + 1] == "    if a:", after


def test_a_binding_for_uses_in_a_loop_goes_above_the_outermost_loop():
    before = (
        "import torch\ndef move(inputs, runtime_inputs_to_move):\n    for i in runtime_inputs_to_move:\n"
        "        if inputs[i] is not None:\n"
        "            inputs[i] = inputs[i].pin_memory().cuda(non_blocking=True)\n    return inputs\n"
    )
    after = (
        "import torch\ndef move(inputs, runtime_inputs_to_move):\n"
        '    device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")\n'
        "    for i in runtime_inputs_to_move:\n        if inputs[i] is not None:\n"
        "            inputs[i] = inputs[i].pin_memory().to(device, non_blocking=True)\n    return inputs\n"
    )
    assert fixed(before, ("NM103",)) == after


@pytest.mark.parametrize(
    "source",
    [
        # torch.random.fork_rng: "Default to cuda instead of CPU since CPU rng is always forked"
        "import torch\ndef fork(device_type=None):\n    acc = torch.accelerator.current_accelerator()\n"
        "    device_type = device_type or (acc.type if acc is not None else 'cuda')\n"
        "    return torch.get_device_module(device_type)\n",
        # a helper that returns the accelerator or None
        "import torch\ndef quantize(module):\n    device = get_current_accelerator() or 'cuda'\n"
        "    module.to(device)\n",
    ],
)
def test_a_device_only_reached_without_an_accelerator_is_left_alone(source):
    """There the idiom would always be the CPU, which the code chose not to use."""
    assert fixed(source) == source
    [note] = findings(source)
    assert note.severity == "info" and "only reached when there is no accelerator" in note.message


def test_a_binding_goes_above_the_first_use_this_run_rewrites():
    """An unsafe fix left for a person (a parameter's default) does not pull the binding up to it; under the
    availability check the name needs no CPU fallback."""
    before = (
        "import torch\n\n\ndef scalars(values, device=torch.device('cuda')):\n"
        "    return torch.tensor(values, device=device)\n\n\n"
        "if torch.cuda.is_available():\n"
        "    print('staged', stage_to_device(torch.ones(2), torch.device('cuda'), non_blocking=True, "
        "copy=True).device)\n"
    )
    after = (
        "import torch\n\n\ndef scalars(values, device=torch.device('cuda')):\n"
        "    return torch.tensor(values, device=device)\n\n\n"
        "if torch.accelerator.is_available():\n"
        "    accelerator = torch.accelerator.current_accelerator()\n"
        "    print('staged', stage_to_device(torch.ones(2), accelerator, non_blocking=True, "
        "copy=True).device)\n"
    )
    assert fixed(before) == after


def test_one_short_use_stays_inline():
    after = fixed("import torch\nx = x.cuda()\n", ("NM103",))
    assert after == (
        "import torch\nx = x.to(torch.accelerator.current_accelerator(check_available=True) or "
        'torch.device("cpu"))\n'
    )


def test_where_an_accelerator_is_certain_the_idiom_has_no_cpu_fallback():
    after = fixed(
        "import torch\ndef f(x):\n    if not torch.cuda.is_available():\n"
        "        raise SystemExit('needs a GPU')\n    return x.cuda()\n"
    )
    assert after.endswith("    return x.to(torch.accelerator.current_accelerator())\n")
    # `.type` on `current_accelerator()` (typed `device | None`) fails a type checker: it keeps the idiom
    assert "(check_available=True)" in fixed(
        "import torch\nif torch.cuda.is_available():\n    device = 'cuda'\n"
    )


def test_the_short_certain_idiom_needs_no_name_where_the_long_one_would():
    """torch's autotune worker: `torch.zeros(1, device="cuda")` under an availability check fits the line with
    the certain idiom; judging its length by the idiom with a CPU fallback bound a name for one use."""
    after = fixed(
        "import torch\ndef warm():\n    if torch.cuda.is_available():\n"
        "        torch.zeros(1, device='cuda')\n",
        layout=Layout(line_length=88),
    )
    assert after.endswith("        torch.zeros(1, device=torch.accelerator.current_accelerator())\n"), after


def test_a_function_every_call_of_which_is_certain_needs_no_guard():
    """The bundled bench.py: `time_ms` is only called after `main()` exits without an accelerator."""
    source = (
        "import torch\ndef time_ms(fn):\n    fn()\n    torch.cuda.synchronize()\n"
        "def main():\n    if not torch.cuda.is_available():\n        raise SystemExit('needs a GPU')\n"
        "    time_ms(print)\n"
    )
    script = source + "if __name__ == '__main__':\n    main()\n"
    assert "    torch.accelerator.synchronize()\n" in fixed(script)
    # a library's public function may be called from anywhere; one passed as a value too
    assert "if torch.accelerator.is_available():" in fixed(source)
    passed = script.replace("    time_ms(print)\n", "    time_ms(print)\n    run(time_ms)\n")
    assert "if torch.accelerator.is_available():" in fixed(passed)
    # a library's private function too: composer's system profiler imports `_get_memory_report` from the
    # memory monitor, whose own caller tests for CUDA first
    private = source.replace("time_ms", "_time_ms")
    assert "if torch.accelerator.is_available():" in fixed(private)


def test_an_f_string_gets_a_name_never_nested_quotes():
    after = fixed('import torch\ndef device_for(rank):\n    return f"cuda:{rank}"\n', ("NM101",))
    assert 'return f"{device_type}:{rank}"' in after


def test_a_class_body_use_binds_above_the_class():
    source = (
        "import torch\n\n\nclass F(torch.autograd.Function):\n    @staticmethod\n"
        "    @torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)\n    def forward(ctx, x):\n"
        "        return x\n"
    )
    after = fixed(source, ("NM203",))
    assert (
        after.startswith("import torch\n\n\ndevice_type = (")
        or "\ndevice_type = " in after.split("class F")[0]
    )
    assert "custom_fwd(device_type=device_type, cast_inputs=torch.float32)" in after


_SCALER = "import torch\ndef get_grad_scaler(**kwargs):\n    if {test}:\n{newer}    else:\n{older}"
_NEWER = "        return torch.amp.GradScaler('cuda', **kwargs)\n"
_OLDER = "        return torch.cuda.amp.GradScaler(**kwargs)\n"


@pytest.mark.parametrize(
    ("test", "newer_first"),
    [
        ("is_torch_version('>=', '2.3')", True),
        ("is_torch_version('>', '2.2.1')", True),
        ("is_torch_version('<', '2.4.0')", False),
        ("is_torch_version(operator.lt, '2.4')", False),
        ("torch_version >= (2, 3)", True),
        ("TORCH_VERSION < (2, 3, 0)", False),
        ("version.parse(torch.__version__) >= version.parse('2.3')", True),
        ("TORCH_VERSION >= version.parse('2.3')", True),
        ("TORCH_2_4", True),  # ultralytics: `TORCH_2_4 = check_version(TORCH_VERSION, "2.4.0")`
        ("not utils.TORCH_2_4", False),
    ],
)
def test_torch_version_helpers_mark_an_old_torch_fallback(test, newer_first):
    """accelerate's `is_torch_version(">=", "2.3")`: the torch < 2.3 branch has no `torch.amp.GradScaler`."""
    newer, older = (_NEWER, _OLDER) if newer_first else (_OLDER, _NEWER)
    source = _SCALER.format(test=test, newer=newer, older=older)
    assert "torch.cuda.amp.GradScaler(**kwargs)" in fixed(source, ("NM202",))


@pytest.mark.parametrize(
    "test", ["is_torch_version('>=', '2.10')", "is_torch_version('<=', '2.9')", "torch_version >= (2, 11)"]
)
def test_a_version_test_that_torch_accelerator_can_pass_is_not_a_fallback(test):
    source = f"import torch\nif {test}:\n    pass\nelse:\n    torch.cuda.synchronize()\n"
    assert "torch.accelerator.synchronize()" in fixed(source, SYNC)


def test_an_elif_precondition_is_analysed():
    """An `elif not available: raise` is held by the `if` above it, not by a block (torch/cuda/_utils.py)."""
    source = (
        "import torch\ndef f(x):\n    if x is None:\n        return None\n"
        "    elif not torch.cuda.is_available():\n        raise RuntimeError('no device')\n"
        "    return x\n"
    )
    assert "elif not torch.accelerator.is_available():" in fixed(source)


def test_a_flag_raised_under_a_test_of_itself_is_no_evidence():
    source = (
        "import torch\ndef f(x, ok=False):\n    if ok or x.is_cuda:\n        ok = True\n"
        "    if ok:\n        torch.cuda.synchronize()\n"
    )
    assert [f.code for f in findings(source)] == ["NM104", "NM401"]
    assert "if torch.accelerator.is_available():" in fixed(source)


def test_a_name_bound_from_itself_is_followed_once():
    """fastai's `default_device`: `use = defaults.use_cuda` and `defaults.use_cuda = use` bind each name
    from the other, and following them to see whether `if use:` tests for `torch.accelerator` never ended
    (RecursionError: the whole file was reported as NM903, its findings lost)."""
    source = (
        "import torch\n\n\ndef default_device(use=-1):\n"
        "    if use == -1: use = defaults.use_cuda\n    else: defaults.use_cuda = use\n"
        "    if use:\n        torch.cuda.synchronize()\n"
    )
    assert [f.code for f in findings(source)] == ["NM401"]


def test_a_name_a_version_branch_binds_to_the_generic_api_is_read_as_that_api():
    """torchrl imports `GradScaler` from `torch.amp` on torch >= 2.3 and from `torch.cuda.amp` below, and
    picks `_make_grad_scaler` per torch version (`@implement_for`). Read as CUDA's scaler, the newer call
    `GradScaler(device_type, enabled=...)` got the device type as `init_scale` (a TypeError on CUDA); the
    function for torch < 2.3 is an old-torch fallback, which keeps its code."""
    source = (
        "import torch\n\nif HAS_DEVICE:\n    from torch.amp import GradScaler\nelse:\n"
        "    from torch.cuda.amp import GradScaler\n\n\n"
        '@implement_for("torch", "2.3")\ndef make(device_type, enabled):\n'
        "    return GradScaler(device_type, enabled=enabled)\n\n\n"
        '@implement_for("torch", None, "2.3")\ndef make(device_type, enabled):  # noqa: F811\n'
        "    return GradScaler(enabled=enabled)\n"
    )
    found = findings(source)
    assert [f.line for f in found] == [16] and found[0].fix is None and "fallback" in found[0].message


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("device = device or (CHOICE)\n", "device = device or device_type\n"),
        ("device = device or(CHOICE)\n", "device = device or device_type\n"),
        ("x = f(CHOICE)\n", "x = f(device_type)\n"),
    ],
)
def test_a_choice_named_in_parentheses_of_its_own_loses_them(before, after):
    """mace: `device or ("cuda" if ... else "cpu")` became `device or (device_type)`."""
    choice = '"cuda" if torch.cuda.is_available() else "cpu"'
    source = "import torch\ndef load(device=None):\n    " + before.replace("CHOICE", choice)
    got = fixed(source, layout=Layout(line_length=88))
    assert got.endswith("    ).type\n    " + after), got


def test_a_test_of_str_of_a_name_keeps_taking_none():
    """stable-ts's dfnet: `if 'cuda' in str(device):` with `device=None`; `torch.device(None)` would raise."""
    source = (
        "import torch\ndef clean(device=None):\n    if 'cuda' in str(device):\n"
        "        torch.cuda.empty_cache()\n    return 1\n"
    )
    got = fixed(source, target_torch=MEMORY_ON_MPS_FROM)
    assert "str(device).split(':')[0] in ('cuda', 'neuron')" in got, got
    namespace: dict = {}
    exec(compile(got, "fixed.py", "exec"), namespace)
    assert namespace["clean"]() == 1 and namespace["clean"]("cpu") == 1


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("self.device", "str(self.device).split(':')[0] in ('cuda', 'neuron')"),  # what the caller gave
        ("images.device", "images.device.type in ('cuda', 'neuron')"),  # a tensor's: a torch.device
    ],
)
def test_str_of_an_objects_own_device_attribute_is_not_taken_for_a_torch_device(device, expected):
    """mmagic's inferencers keep the caller's string (`self.device = device`, `"cuda"` from the demo):
    `self.device.type` would raise `AttributeError` on CUDA (review 31, class a)."""
    source = (
        "import torch\n\n\nclass Inferencer:\n    def __init__(self, device=None):\n"
        "        self.device = device\n\n    def preprocess(self, images):\n"
        f"        if 'cuda' in str({device}):\n            images = images.cuda()\n        return images\n"
    )
    got = fixed(source)
    assert expected in got, got
    namespace: dict = {}
    exec(compile(got, "fixed.py", "exec"), namespace)
    assert namespace["Inferencer"]("cpu").preprocess(torch.ones(1)).device.type == "cpu"


def test_a_test_of_a_parameter_that_defaults_to_cuda_does_not_make_an_accelerator_certain():
    """stable-ts's noisereduce: `device="cuda"` is what the caller asked for; the library falls back to CPU
    where there is no GPU, and `torch.accelerator.empty_cache()` raises there."""
    source = (
        "import torch\ndef clean(device='cuda'):\n    if 'cuda' in str(device):\n"
        "        torch.cuda.empty_cache()\n    return 1\n"
    )
    got = fixed(source, target_torch=MEMORY_ON_MPS_FROM)
    assert (
        "        if torch.accelerator.is_available():\n            torch.accelerator.empty_cache()" in got
    ), got
    namespace: dict = {}
    exec(compile(got, "fixed.py", "exec"), namespace)
    assert namespace["clean"]() == 1
    unguarded = fixed(source.replace("device='cuda'", "device=None"), target_torch=MEMORY_ON_MPS_FROM)
    assert "is_available" not in unguarded, unguarded


def test_code_after_a_call_that_raises_without_an_accelerator_has_one():
    """fairscale's SendRecvTransport calls `torch.cuda.current_stream().synchronize()` first: the rest of the
    function only runs with an accelerator, so a CPU fallback or an availability guard there would be dead
    code (review 30 NITs). A call under a condition proves nothing."""
    source = (
        "import torch\n\n\ndef send(msg):\n    torch.cuda.current_stream().synchronize()\n"
        "    t = msg.cuda()\n    torch.cuda.empty_cache()\n    return t\n"
    )
    got = fixed(source, target_torch=MEMORY_ON_MPS_FROM)
    assert "t = msg.to(torch.accelerator.current_accelerator())" in got, got
    assert "is_available" not in got and 'torch.device("cpu")' not in got
    conditional = source.replace(
        "    torch.cuda.current_stream().synchronize()\n",
        "    sync and torch.cuda.current_stream().synchronize()\n",
    )
    assert "is_available" in fixed(conditional, target_torch=MEMORY_ON_MPS_FROM)


@pytest.mark.parametrize(
    "check",
    [
        'if accelerator not in {"cpu", "cuda"}:\n        raise ValueError(accelerator)\n',
        'assert accelerator in ("cpu", "cuda", "mps")\n',
    ],
)
def test_code_after_a_check_that_turns_neuron_away_is_left_for_a_person(check):
    """anomalib's benchmark raises for any accelerator but the CPU and CUDA, then counts CUDA devices for
    `cuda:{i}` jobs: a rewrite after that check serves a device that never gets there (review 37, class d)."""
    source = f"import torch\ndef runners(accelerator):\n    {check}    return torch.cuda.device_count()\n"
    assert fixed(source) == source
    (count,) = [f for f in findings(source) if "torch.cuda.device_count" in f.message]
    assert "a check that turns neuron away" in count.message and count.fix is None
    admitted = source.replace('"cuda"', '"cuda", "neuron"')
    assert "torch.accelerator.device_count()" in fixed(admitted)
    head = "import torch\ndef runners(accelerator):\n"
    after = f"{head}    n = torch.cuda.device_count()\n    {check}    return n\n"
    assert "torch.accelerator.device_count()" in fixed(after)  # the check comes after the code
    nested = source.replace("    return torch", "    def count():\n        return torch")
    assert "torch.accelerator.device_count()" in fixed(nested)  # another function: called from anywhere


@pytest.mark.parametrize(
    ("top", "bound"),
    [
        ("import torch\ntry:\n    import apex\nexcept ImportError:\n    apex = None\n", True),
        ("import sys\nsys.path.insert(0, '.')\nimport torch\n", False),  # bound before `import torch`
    ],
)
def test_a_test_modules_device_goes_after_its_imports_and_torchs(top, bound):
    body = (
        "\n\ndef test_a():\n    w = torch.randn(3).cuda()\n\n\ndef test_b():\n    w = torch.randn(3).cuda()\n"
    )
    after = fixed(top + body, ("NM103",), path="test_it.py")
    if bound:
        assert after.startswith(top + "\n\nDEVICE = torch.accelerator"), after
    else:
        assert "DEVICE" not in after and after.count("current_accelerator(") == 2


def test_the_device_chosen_in_a_branch_is_not_looked_up_above_the_statement():
    """outetts (review 49): `torch.device(device if device is not None else "cuda" if ... else "cpu")` is too
    long for one line with the idiom, and a name bound above the statement ran the lookup where the code
    did not (a caller's device given). The idiom stays in its branch, wrapped."""
    source = (
        "import torch\n\n\nclass Codec:\n    def __init__(self, device=None):\n"
        "        self.device = torch.device(device if device is not None"
        ' else "cuda" if torch.cuda.is_available() else "cpu")\n'
    )
    after = fixed(source, layout=Layout(line_length=88, config=Path("pyproject.toml")))
    assert "device_type =" not in after and "accelerator =" not in after, after
    assert "else (\n                torch.accelerator.current_accelerator(check_available=True)" in after, (
        after
    )
    assert all(len(line) <= 88 for line in after.splitlines()), after


def test_a_device_index_is_never_the_cpu_s_device():
    """cellpose's `torch.cuda.memory_allocated(device0.index)` and ms-swift's `for i in range(count):` (review
    50) pass an index: the caution "call it only for an accelerator device (`if device0.index.type !=
    "cpu":`)" was advice that raises on an int."""
    source = (
        "import torch\n\n\ndef report(device0):\n    if device0.type == 'cuda':\n"
        "        used = torch.cuda.memory_allocated(device0.index)\n"
        "    for i in range(torch.cuda.device_count()):\n        print(torch.cuda.memory_allocated(i))\n"
    )
    memory = [f for f in findings(source, target_torch=(2, 13), unsafe=True) if f.code == "NM403"]
    assert [f.fix.safety for f in memory] == ["safe", "safe"]
    assert not any("may be the CPU's device" in f.message for f in memory)
