"""Code that stays CUDA's: checks around CUDA-only code keep it, and code that only runs on CUDA is left alone
(the patterns that broke working code in the field, each as it was seen)."""

from __future__ import annotations

import json

import pytest

from neuron_migrate.migrate.cautions import MEMORY_ON_MPS_FROM

from .helpers import findings, fixed, fixed_until_stable

ALL = None  # every rule, as `fix` runs them


@pytest.mark.parametrize(
    ("source", "stays"),
    [
        # capability queries under (or next to) the check
        (
            "import torch\nif torch.cuda.is_available() and torch.cuda.is_bf16_supported():\n"
            "    dtype = torch.bfloat16\n",
            "torch.cuda.is_available() and torch.cuda.is_bf16_supported()",
        ),
        (
            "import torch\nif torch.cuda.is_available():\n"
            "    mem = torch.cuda.get_device_properties(0).total_memory\n"
            "    torch.cuda.synchronize()\n",
            "    torch.cuda.synchronize()\n",
        ),
        (
            "import torch\nok = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)\n",
            "ok = torch.cuda.is_available()",
        ),
        # CUDA-only libraries and kernels named in the guarded code, and messages that say it needs CUDA
        (
            "import torch\ndef load():\n    if not torch.cuda.is_available():\n"
            "        raise RuntimeError('needs CUDA')\n"
            "    major, minor = torch.cuda.get_device_capability()\n",
            "if not torch.cuda.is_available():",
        ),
        (
            "import torch\nif torch.cuda.is_available():\n"
            "    from executorch.backends.cuda import CudaBackend\n",
            "if torch.cuda.is_available():",
        ),
        (
            "import torch\ndef f(q):\n    if q.is_cuda and flash_attn_available:\n        return flash(q)\n",
            "q.is_cuda",
        ),
        # a flag that is about CUDA-only kernels
        (
            "import torch\nuse_cuda = torch.cuda.is_available()\nif use_cuda:\n"
            "    name = torch.cuda.get_device_name()\n",
            "use_cuda = torch.cuda.is_available()",
        ),
        # the `else` of a negated check (torch's `get_all_device_types` would list "cuda" on a neuron host)
        (
            "import torch\ndef get_all_device_types():\n"
            "    return ['cpu'] if not torch.cuda.is_available() else ['cpu', 'cuda']\n",
            "if not torch.cuda.is_available()",
        ),
    ],
)
def test_a_check_around_cuda_only_code_stays_cuda(source, stays):
    after = fixed(source, ALL)
    assert stays in after, after
    notes = [f.message for f in findings(source) if f.code in ("NM104", "NM105", "NM106")]
    assert notes and all("CUDA-only" in m or "only runs on CUDA" in m for m in notes), notes


@pytest.mark.parametrize(
    "source",
    [
        # a function about CUDA by its name (an override of nn.Module.cuda, a helper that asks about CUDA)
        "import torch\nclass M(torch.nn.Module):\n    def cuda(self, *args, **kwargs):\n"
        "        return super().cuda(*args, **kwargs)\n",
        "import torch\ndef is_torch_cuda_available():\n    return torch.cuda.is_available()\n",
        # mmpose's data container: its `cuda()` is its API, also through a lambda in it
        "import torch\nclass Data:\n    def cuda(self):\n        return self._convert(lambda x: x.cuda())\n",
        # behind a test about CUDA that no rule rewrites
        "import torch\nif len(torch.cuda.default_generators) > 0:\n    i = torch.cuda.current_device()\n",
        "import torch\nif is_torch_cuda_available():\n    device = torch.device('cuda:0')\n",
        # Jetson is NVIDIA's embedded CUDA platform (torch's `IS_JETSON`)
        "import torch\nif IS_JETSON:\n    torch.cuda.empty_cache()\n",
        # an argument of CUDA-only code that stays
        "import torch\nmajor = torch.cuda.get_device_properties(torch.cuda.current_device()).major\n",
        # a per-device dispatch table: CUDA's entry stays CUDA's
        "import torch\nSYNC = {'cuda': torch.cuda.synchronize, 'xpu': torch.xpu.synchronize}\n",
        # one branch of a per-device chain: a generic test would take the other devices' branches
        "import torch\nif torch.cuda.is_available():\n    torch.cuda.empty_cache()\n"
        "elif is_torch_npu_available():\n"
        "    torch.npu.empty_cache()\n",
        "import torch\ndef ctx(device):\n    if device.type == 'cuda':\n        return 1\n"
        "    elif device.type == 'mlu':\n"
        "        return 2\n",
        "import torch\ndef bf16(device):\n    if device == 'cuda':\n"
        "        return is_torch_bf16_gpu_available()\n"
        "    if device == 'hpu':\n        return True\n",
        # `.cuda(*args)`: the device may be among the arguments
        "import torch\ndef move(m, *args):\n    return m.cuda(*args)\n",
    ],
)
def test_code_that_only_runs_on_cuda_is_left_alone(source):
    assert fixed(source, ALL) == source


def test_a_precondition_is_judged_by_the_code_it_protects_not_by_its_message():
    """`if not torch.cuda.is_available(): raise SystemExit("needs a CUDA GPU")` guards what follows; when that
    is device-agnostic after the fix, the precondition becomes one for any accelerator."""
    source = (
        "import torch\ndef main():\n    if not torch.cuda.is_available():\n"
        "        raise SystemExit('bench.py needs a CUDA GPU')\n    x = torch.ones(2).cuda()\n"
    )
    after = fixed(source)
    assert (
        "if not torch.accelerator.is_available():" in after
        and "raise SystemExit('bench.py needs a CUDA GPU')" in after
    )


@pytest.mark.parametrize(
    ("setting", "generic"),
    [('config["use_gpu"]', True), ("config.use_gpu", True), ('config["nccl_port"]', False)],
)
def test_a_settings_name_says_gpu_for_any_accelerator(setting, generic):
    """recbole's `torch.cuda.is_available() and config["use_gpu"]`: the key names a setting, as `use_gpu`
    does as an attribute, and "GPU" there means an accelerator; CUDA's names in a key still count."""
    source = f"import torch\ndef f(config):\n    return torch.cuda.is_available() and {setting}\n"
    assert ("torch.accelerator.is_available()" in fixed(source)) is generic


def test_a_warning_that_only_runs_without_an_accelerator_does_not_keep_its_check_cuda():
    """transformers' SINQ quantizer: kept CUDA's, the warning told a Trainium user that the model runs on the
    CPU while the rewritten device choice next to it put it on neuron. Rewritten, it warns only where there is
    no accelerator, where "no CUDA device" is still true."""
    source = (
        "import torch\ndef validate():\n    if not torch.cuda.is_available():\n"
        "        logger.warning('No CUDA device is available. Inference will run on the CPU.')\n"
    )
    after = fixed(source)
    assert "if not torch.accelerator.is_available():" in after, after


def test_a_warning_stays_with_the_device_choice_it_describes():
    """The same quantizer where its device choice stays CUDA's (held back, or guarding CUDA-only code): the
    model still lands on the CPU on Trainium, so the warning that says so stays true only as it is."""
    source = (
        "import torch\nclass Quantizer:\n    def update_device_map(self, device_map):\n"
        "        if torch.cuda.is_available():\n            print(torch.cuda.get_device_name())\n"
        "            return {'': 0}\n        return {'': 'cpu'}\n\n"
        "    def validate(self):\n        if not torch.cuda.is_available():\n"
        "            logger.warning('No CUDA device is available. Inference will run on the CPU.')\n"
    )
    assert fixed(source) == source
    warning = next(f for f in findings(source) if f.line == 10)
    assert "its warning tells where the code runs, which `torch.cuda.is_available()`" in warning.message


@pytest.mark.parametrize(
    "source",
    [
        # the side with an accelerator says CUDA: on neuron it would print a wrong message
        "import torch\nif torch.cuda.is_available():\n    print('Using CUDA')\n",
        "import torch\nif not torch.cuda.is_available():\n    print('no GPU')\n"
        "else:\n    print('CUDA ready')\n",
        # more than a message: the flag it clears may feed CUDA-only code elsewhere (torch's checkpoint
        # stager)
        "import torch\nif pin and not torch.cuda.is_available():\n"
        "    warnings.warn('pinning requires CUDA')\n    pin = False\n",
        # a strong mention on the side without an accelerator (a CUDA-only library) still keeps it
        "import torch\nif not torch.cuda.is_available():\n    import bitsandbytes\n",
    ],
)
def test_a_message_on_the_accelerator_side_keeps_its_check_cuda(source):
    assert fixed(source) == source


def test_a_function_that_keeps_cuda_graph_code_is_ported_as_a_whole():
    """The side stream and the waits around a capture exist for it: rewriting them while the capture stays
    leaves a function half CUDA's that still cannot run on Trainium (torch's symmetric memory)."""
    capture = (
        "import torch\ndef capture(model, x):\n    s = torch.cuda.Stream()\n"
        "    s.wait_stream(torch.cuda.current_stream())\n    with torch.cuda.stream(s):\n        model(x)\n"
        "    g = torch.cuda.CUDAGraph()\n    with torch.cuda.graph(g):\n        y = model(x)\n"
        "    return g, y\n"
    )
    source = capture + "def place(model):\n    return model.cuda()\n"
    after = fixed(source)
    assert after.startswith(capture), after
    assert "model.cuda()" not in after  # another function is still fixed
    notes = [f.message for f in findings(source) if f.code == "NM406"]
    assert notes and all("keeps CUDA graph code (`torch.cuda.CUDAGraph()`)" in m for m in notes), notes


def test_a_value_only_an_nccl_test_reads_stays_cuda_and_so_does_the_test_around_it():
    """torch's c10d: the backend fetched for CUDA is only ever checked for being NCCL's; rewriting the fetch
    (and the `in devices` test around it) changes nothing on Trainium and leaves the function half CUDA's."""
    source = (
        "import torch\ndef timeouts(pg, devices, timeout):\n"
        "    if torch.device('cuda') in devices:\n"
        "        backend = pg._get_backend(torch.device('cuda'))\n"
        "        if is_nccl_available() and isinstance(backend, ProcessGroupNCCL):\n"
        "            backend._add_ephemeral_timeout(timeout)\n"
    )
    assert fixed(source) == source
    messages = {f.line: f.message for f in findings(source) if f.code == "NM102"}
    assert "its value goes to CUDA-only code that stays" in messages[4], messages
    assert "its test guards CUDA-only code that stays" in messages[3], messages


@pytest.mark.parametrize(
    "reader",
    [
        "    try:\n        ok = isinstance(backend, ProcessGroupNCCL)\n"
        "    except RuntimeError:\n        ok = False\n",
        "    try:\n        pass\n    finally:\n        nccl_timeout(backend)\n",
        "    with lock:\n        for _ in range(2):\n            pass\n"
        "        else:\n            nccl_timeout(backend)\n",
        "    if flag:\n        pass\n    elif isinstance(backend, ProcessGroupNCCL):\n        pass\n",
    ],
)
def test_nccl_code_that_reads_the_value_counts_in_any_block_after_it(reader):
    source = (
        "import torch\ndef fetch(pg, lock, flag):\n    backend = pg._get_backend(torch.device('cuda'))\n"
        + reader
    )
    assert fixed(source) == source
    plain = source.replace("ProcessGroupNCCL", "ProcessGroupGloo").replace("nccl_timeout", "set_timeout")
    assert fixed(plain) != plain  # without the NCCL-named reader the fetch is rewritten


def test_a_state_saved_by_cuda_code_that_stays_is_restored_by_it_too():
    """torch's Dynamo saves the CUDA RNG state under a CUDA check that stays; restoring it through the
    accelerator's module would be half a migration."""
    source = (
        "import torch\ndef run(fn):\n    state = None\n    if torch.cuda.is_available():\n"
        "        state = torch.cuda.get_rng_state()\n        print(torch.cuda.get_device_name())\n"
        "    fn()\n    if state is not None:\n        torch.cuda.set_rng_state(state)\n"
    )
    assert fixed(source) == source
    setter = next(f for f in findings(source) if f.line == 9)
    assert "it takes a value CUDA-only code gives (`state = torch.cuda.get_rng_state()`)" in setter.message


def test_a_device_test_of_a_choice_that_stays_cuda_s_waits_for_it(run_cli, tmp_path):
    """e3nn's benchmark (review 41 #1): its torch 2.2 floor holds back the generic device choice, so `device`
    can only be "cuda" or "cpu", and `args.cuda = device == "cuda"` made generic would never see neuron. The
    choice's reason is the floor, not the availability check beside it in its own test."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch>=2.2"]\n')
    (tmp_path / "bench.py").write_text(
        "import torch\n\n\ndef main(args):\n"
        '    device = "cuda" if (torch.cuda.is_available() and args.cuda) else "cpu"\n'
        '    args.cuda = device == "cuda"\n    return device\n'
    )
    found = json.loads(run_cli("scan", ".", "--format", "json", "--exit-zero").stdout)["findings"]
    by_line = {(f["line"], f["code"]): f for f in found}
    test = by_line[(6, "NM105")]
    assert test["fix"] is None and "it takes a value CUDA-only code gives (`device = " in test["message"]
    choice = by_line[(5, "NM105")]["message"]
    assert "the fix needs torch >= 2.7" in choice and "torch.cuda.is_available()" not in choice, choice


def test_a_device_choice_that_stays_holds_its_functions_generic_fixes(run_cli, tmp_path):
    """e3nn's profile script (review 41 #3): while `device` stays "cuda" or the CPU (its floor holds the
    choice back), profiling every supported activity in the same function serves an accelerator it never
    picks."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch>=2.2"]\n')
    body = (
        "import torch\n\n\ndef main(run):\n"
        '    device = "cuda" if torch.cuda.is_available() else "cpu"\n'
        "    with torch.profiler.profile(\n"
        "        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]\n"
        "    ):\n        run(device)\n"
    )
    (tmp_path / "prof.py").write_text(body)
    found = json.loads(run_cli("scan", ".", "--format", "json", "--exit-zero").stdout)["findings"]
    activity = next(f for f in found if f["code"] == "NM409")
    assert activity["fix"] is None and 'its function keeps `"cuda" if' in activity["message"], activity
    (tmp_path / "prof.py").write_text(body.replace('"cuda" if torch.cuda.is_available() else "cpu"', '"cpu"'))
    found = json.loads(run_cli("scan", ".", "--format", "json", "--exit-zero", "--no-cache").stdout)[
        "findings"
    ]
    assert next(f for f in found if f["code"] == "NM409")["fix"] is not None


def test_a_function_that_activates_flash_attention_3_keeps_its_cuda_code():
    """torch registers its FlashAttention-3 and -4 implementations for CUDA only; torchao's FP8 SDPA tests
    activate FA3 in a `with` or a loop (review 40 #136-#148). A plain SDPA baseline beside them is fixed."""
    source = (
        "import torch\nfrom torch.nn.attention import activate_flash_attention_impl\n\n\n"
        "def test_fp8():\n    q = torch.randn(2, 8, device='cuda')\n    with torch.no_grad():\n"
        "        for _ in range(3):\n            activate_flash_attention_impl('FA3')\n"
        "            out = torch.nn.functional.scaled_dot_product_attention(q, q, q)\n    return out\n\n\n"
        "def test_regular():\n    q = torch.randn(2, 8, device='cuda')\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, q, q)\n"
    )
    by_line = {f.line: f for f in findings(source, ("NM101",))}
    assert by_line[6].fix is None
    assert (
        "requires `torch.nn.attention.activate_flash_attention_impl`, which is CUDA-only"
        in by_line[6].message
    )
    assert by_line[15].fix is not None


def test_a_device_built_from_an_index_that_cuda_code_picks_waits_for_it():
    """axolotl's feature network (review 40 #15): `actor_gpu` is the CUDA device's index, or 0, by a CUDA test
    that waits for review; `torch.device(f"cuda:{actor_gpu}")` made generic would put every rank on
    `<accelerator>:0`. An index from elsewhere (`LOCAL_RANK`) is fixed; an attribute named like the variable
    (`x.gpu`) is not the variable."""
    source = (
        "import os\n\nimport torch\n\n\ndef f(x):\n"
        '    gpu = x.device.index if x.device.type == "cuda" else 0\n'
        '    return torch.device(f"cuda:{gpu}")\n\n\n'
        'def g(x):\n    gpu = int(os.environ["LOCAL_RANK"])\n    return torch.device(f"cuda:{x.gpu}")\n'
    )
    by_line = {f.line: f for f in findings(source, ("NM102", "NM105"))}
    assert by_line[8].fix is None and "it takes a value CUDA-only code gives (`gpu = x.device.index" in (
        by_line[8].message
    )
    assert by_line[13].fix is not None


def test_a_choice_whose_cuda_test_waits_waits_with_it():
    """ART's estimator (review 42 #17): its availability check waits for CUDA code of the module, so a
    generic `"cuda:0"` branch behind `torch.cuda.is_available()` would never be taken off CUDA: dead code."""
    source = (
        "import torch\n\n\ndef restore(self, devices):\n"
        '    self._device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")\n'
        "    if torch.cuda.is_available() and devices:\n        torch.cuda.init()\n"
    )
    choice = next(f for f in findings(source, ("NM105", "NM106", "NM112")) if f.code == "NM105")
    assert (
        choice.fix is None and "its test `torch.cuda.is_available()` stays CUDA's for now" in choice.message
    )
    alone = source.split("    if torch.cuda.is_available() and devices")[0]
    assert all(f.fix is not None for f in findings(alone, ("NM105", "NM106")))


@pytest.mark.parametrize(
    ("function", "unsafe"),
    [
        ("def save(f):\n    torch.save({'cuda': torch.cuda.get_rng_state_all()}, f)\n", True),
        ("def load(f):\n    torch.cuda.set_rng_state_all(torch.load(f)['cuda'])\n", True),
        ("def state_dict(self):\n    return {'cuda': torch.cuda.get_rng_state_all()}\n", True),
        # kept and restored within the run: the same device
        (
            "def run(fn):\n    states = torch.cuda.get_rng_state_all()\n    fn()\n"
            "    torch.cuda.set_rng_state_all(states)\n",
            False,
        ),
    ],
)
def test_generator_states_a_checkpoint_carries_get_an_unsafe_fix(function, unsafe):
    """poutyne saves `torch.cuda.get_rng_state_all()` under "cuda" in a `torch.save` and restores it from
    `torch.load` (review 42 #1, #2): made generic, an MPS checkpoint resumed on CUDA puts MPS states into
    CUDA's generators and fails, where the CUDA calls had saved nothing off CUDA."""
    found = findings("import torch\n\n\n" + function, ("NM405",))
    assert found and all((f.fix.safety == "unsafe") is unsafe for f in found)
    assert all(("the states go through a checkpoint" in f.message) is unsafe for f in found)


@pytest.mark.parametrize(
    ("returned", "unsafe"),
    [
        ('mode in ("loss", "full") or (auto and mode == "auto" and device.type == "cuda")', True),
        ('not (device.type == "cuda" and fast)', True),
        ('device.type == "cuda"', False),  # a bare predicate: where the tensor is
    ],
)
def test_a_device_test_returned_as_one_condition_of_a_policy_needs_review(returned, unsafe):
    """unsloth's `compile_loss` returns whether to compile the loss, `"auto"` meaning CUDA, where it was
    measured faster (review 42 #22): letting neuron in changes a policy its callers act on."""
    source = (
        f"import torch\n\n\ndef compile_loss(mode, device, auto=True, fast=True):\n    return {returned}\n"
    )
    [test] = findings(source, ("NM105",))
    assert (test.fix.safety == "unsafe") is unsafe
    assert ("its answer is what `compile_loss` returns" in test.message) is unsafe


def test_a_finding_without_a_fix_in_cuda_only_code_says_so():
    """poutyne's `Model.cuda()` passes its arguments on to `self.network.cuda(*args, **kwargs)` (review 42):
    the finding has no fix (the arguments are unpacked), and its advice to pass the device by hand was wrong
    for a method whose contract is CUDA. A CUDA-only library's import keeps its porting advice."""
    source = (
        "import torch\n\n\nclass Model:\n    def cuda(self, *args, **kwargs):\n"
        "        self.network.cuda(*args, **kwargs)\n        return self\n\n\n"
        "def move(net, *args):\n    return net.cuda(*args)\n"
    )
    by_line = {f.line: f for f in findings(source, ("NM103",))}
    assert "it is in `cuda`, which is about CUDA by its name" in by_line[6].message
    assert "pass the device by hand" in by_line[11].message


def test_a_state_stored_under_a_cuda_key_is_saved_and_restored_alike():
    """fairscale's checkpointing saves `state["cuda_rng_state"]` under one CUDA check and restores it under
    another: made generic, only the restore would read a key the save no longer writes (KeyError)."""
    source = (
        "import torch\n\n\ndef get_rng_state():\n    state = {}\n    if torch.cuda.is_available():\n"
        '        state["cuda_rng_state"] = torch.cuda.get_rng_state()\n    return state\n\n\n'
        "def set_rng_state(state):\n    if torch.cuda.is_available():\n"
        '        torch.cuda.set_rng_state(state["cuda_rng_state"])\n'
    )
    assert fixed(source) == source


_MAKER = (
    "import torch\n_streams = {}\ndef _side_stream(priority=0):\n    if priority not in _streams:\n"
    "        _streams[priority] = torch.cuda.Stream(priority=priority)\n    return _streams[priority]\n"
    "def _log():\n    print(torch.cuda.get_device_name())\n    return None\n"
    "def reduce(tensor):\n    _side_stream().wait_stream(torch.cuda.current_stream())\n"
    "def count():\n    return _log() or torch.cuda.device_count()\n"
)


def test_a_statement_that_uses_what_a_cuda_maker_returns_stays_with_it():
    """torch's symmetric memory: `_get_backend_stream()` makes a `torch.cuda.Stream` (for a person, it has a
    priority); waiting on it from the accelerator's stream would mix two stream APIs in one statement. A call
    to a function whose CUDA code is not what it returns (`_log()`) ties nothing."""
    assert "torch.cuda.current_stream()" in fixed(_MAKER)
    assert "_log() or torch.accelerator.device_count()" in fixed(_MAKER)  # not what `_log()` returns
    waiter = next(f for f in findings(_MAKER) if f.line == 11)
    assert (
        "works with what `_side_stream()` makes, which stays CUDA's "
        "(`torch.cuda.Stream(priority=priority)`)" in waiter.message
    )
    reviewed = fixed(_MAKER, unsafe=True)  # the maker rewritten too: both go
    assert "torch.Stream(priority=priority)" in reviewed
    assert "_side_stream().wait_stream(torch.accelerator.current_stream())" in reviewed


def test_a_model_placed_for_cuda_code_left_for_a_person_keeps_its_inputs_with_it():
    """torch's DDP tests: `DistributedDataParallel(model.cuda(rank), device_ids=[rank])` is for a person (the
    `device_ids` fix is unsafe), so the model stays on CUDA; moving the inputs to the accelerator alone would
    be half a migration (on neuron the model still fails). With `--unsafe-fixes` all of it moves."""
    source = (
        "import torch\nfrom torch import nn\ndef run(model, x, rank):\n"
        "    ddp = nn.parallel.DistributedDataParallel(model.cuda(rank), device_ids=[rank])\n"
        "    x = x.cuda(rank)\n    return ddp(x)\n"
    )
    assert fixed(source) == source
    messages = {f.line: f.message for f in findings(source) if f.code == "NM103"}
    assert "argument of CUDA-only code left for a person" in messages[4]
    assert "its function keeps `model.cuda(rank)` for a person" in messages[5]
    assert ".cuda(" not in fixed(source, unsafe=True)


def test_a_function_that_keeps_a_call_for_a_person_keeps_its_other_uses_of_it():
    """torch's symmetric memory: one of a function's `torch.cuda.current_stream()` calls hands its stream on
    and is for a person, so those used as any stream stay as well (one call, one way per function)."""
    source = (
        "import torch\ndef pipelined(side, work):\n"
        "    side.wait_stream(torch.cuda.current_stream())\n"
        "    work(torch.cuda.current_stream())\n"
        "    torch.cuda.current_stream().wait_stream(side)\n"
    )
    assert fixed(source) == source
    messages = {f.line: f.message for f in findings(source) if f.code == "NM406"}
    assert "its function keeps `torch.cuda.current_stream()` for a person" in messages[3], messages
    assert "its function keeps" in messages[5], messages
    # code that only runs on CUDA is no to-do: it holds nothing back
    guarded = (
        "import torch\ndef step(side):\n    side.wait_stream(torch.cuda.current_stream())\n"
        "    if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9:\n"
        "        hopper(torch.cuda.current_stream())\n"
    )
    assert "torch.accelerator.current_stream()" in fixed(guarded)


def test_a_function_that_cannot_run_off_cuda_until_a_person_changes_it_is_migrated_as_a_whole():
    """The bundled example's overlapped steps: `torch.cuda.nvtx.range_push` has no automatic fix and raises
    off CUDA, so moving the function's streams to the accelerator would be half a migration (torch's
    distributed tests moved `set_device` beside inputs that stay `.cuda()`). What answers anywhere holds
    nothing back: an environment setting, a CUDA check, code after one in an `and`."""
    source = (
        "import torch\ndef steps(batches):\n    side = torch.cuda.Stream()\n"
        "    for i, batch in enumerate(batches):\n        torch.cuda.nvtx.range_push(f'step {i}')\n"
        "        with torch.cuda.stream(side):\n            run(batch)\n        torch.cuda.nvtx.range_pop()\n"
    )
    assert fixed(source) == source
    stream = next(f for f in findings(source) if f.line == 3)
    keeps = "its function keeps `torch.cuda.nvtx.range_push(f'step {i}')` for a person"
    assert f"{keeps}: migrate the function as a whole" in stream.message
    harmless = (
        "import os, torch\ndef steps(side):\n    os.environ['CUDA_VISIBLE_DEVICES'] = '0'\n"
        "    side.wait_stream(torch.cuda.current_stream())\n"
        "    if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9:\n        fast()\n"
    )
    assert "side.wait_stream(torch.accelerator.current_stream())" in fixed(harmless)


def test_the_closures_a_function_defines_are_migrated_with_it():
    """torchtune's activation offloader keeps `self.s0 = torch.cuda.default_stream()` (no accelerator
    equivalent) in `__init__`, where the hook that moves tensors back with `.to("cuda")` is defined: the
    hook cannot run off CUDA until `__init__` is ported, so it waits with it."""
    source = (
        "import torch\nclass Offload:\n    def __init__(self):\n"
        "        self.s0 = torch.cuda.default_stream()\n        def unpack(t):\n"
        "            return t.to('cuda', non_blocking=True)\n"
        "        self.unpack = unpack\n"
    )
    assert fixed(source) == source
    placement = next(f for f in findings(source) if f.code == "NM101")
    assert "its function keeps `torch.cuda.default_stream()` for a person" in placement.message
    assert placement.tied


def test_a_class_defined_in_a_function_that_requires_a_cuda_only_library_keeps_its_cuda_code():
    """ultralytics' TensorRT export: the INT8 calibrator, a class inside the export function, moves its batch
    with `.to("cuda")` for TensorRT's device pointers; the function imports `tensorrt` (installing it when
    the first import fails), so the calibrator only exists where TensorRT runs."""
    source = (
        "import torch\ndef export(data):\n    try:\n        import tensorrt as trt\n    except ImportError:\n"
        "        install('tensorrt')\n        import tensorrt as trt\n"
        "    class Calibrator(trt.IInt8Calibrator):\n        def get_batch(self, names):\n"
        "            batch = next(data).to('cuda')\n            return [int(batch.data_ptr())]\n"
    )
    assert fixed(source) == source
    placement = next(f for f in findings(source) if f.code == "NM101")
    assert "its function requires `tensorrt`, which is CUDA-only: no change needed" in placement.message
    # a handler that neither raises nor imports it again: the function may run without the library
    optional = source.replace("install('tensorrt')\n        import tensorrt as trt", "trt = None")
    assert "torch.accelerator" in fixed(optional)


@pytest.mark.parametrize(
    ("keys", "kept"),
    [
        (("CUDA", "Meta"), "CUDA"),
        (("CUDA", "CPU", "AutogradCPU", "Meta"), "the CPU and CUDA"),
        (("CUDA", "CPU", "XPU", "Meta"), None),
    ],
)
def test_a_module_that_registers_kernels_for_cuda_only_serves_them(keys, kept):
    """torch's symmetric memory registers its fused operators for "CUDA" (and "Meta" shapes) only: its events
    and streams serve those kernels; so do spikingjelly's operators, registered for "CPU" and "CUDA" (review
    39 #1: its fake kernel describes the CUDA kernels' layout for `device.type == "cuda"`). FSDP's `copy_`,
    registered for XPU and HPU too, is generic."""
    registrations = "".join(f'@torch.library.impl(lib, "fused", "{key}")\n' for key in keys)
    source = (
        'import torch\nlib = torch.library.Library("symm", "DEF")\n'
        f"{registrations}def fused(x):\n    return x\n"
        "def wait(work):\n    done = torch.cuda.Event()\n    work.record(done)\n"
    )
    assert (fixed(source) == source) is (kept is not None)
    if kept:
        event = next(f for f in findings(source) if "Event" in f.message)
        assert f"registers its operators' kernels for {kept} only (`impl(...)`)" in event.message


def test_timing_code_that_keeps_a_cuda_stream_for_a_person_stays_cuda_as_a_whole():
    """torch's runtime estimator records its events on `torch.cuda.current_stream()`, which is for a person
    (its stream is passed on): the events' guarded `record(...)` would keep that CUDA stream behind an
    accelerator check, and a generic synchronize beside CUDA events is half a migration."""
    source = (
        "import torch\ndef estimate(func):\n"
        "    start = torch.cuda.Event(enable_timing=True)\n"
        "    end = torch.cuda.Event(enable_timing=True)\n"
        "    start.record(torch.cuda.current_stream())\n    func()\n"
        "    end.record(torch.cuda.current_stream())\n    torch.cuda.synchronize()\n"
        "    return start.elapsed_time(end)\n"
    )
    assert fixed(source) == source
    messages = {f.line: f.message for f in findings(source)}
    assert "what it rewrites keeps CUDA-only code that stays, `torch.cuda.current_stream()`" in messages[3]
    assert "its function keeps `torch.cuda.current_stream()` for a person" in messages[8], messages
    # with the stream fixed too (`fix --unsafe-fixes`), the function moves as a whole
    after = fixed_until_stable(source, unsafe=True)
    assert "torch.cuda" not in after, after
    # timing elsewhere in the module is not held back by it
    other = source + "def sync():\n    torch.cuda.synchronize()\n"
    assert "torch.accelerator.synchronize()" in fixed(other)
    # nor is CUDA's own sleep kernel, timed with events (torch's get_cycles_per_ms), ported halfway
    sleeps = (
        "import torch\ndef measure(cycles):\n    start = torch.cuda.Event(enable_timing=True)\n"
        "    end = torch.cuda.Event(enable_timing=True)\n    start.record()\n    torch.cuda._sleep(cycles)\n"
        "    end.record()\n    end.synchronize()\n    return cycles / start.elapsed_time(end)\n"
    )
    assert fixed(sleeps) == sleeps
    assert "its function keeps `torch.cuda._sleep(...)` for a person" in findings(sleeps)[0].message


def test_a_kept_cuda_test_holds_back_only_what_it_alone_guards():
    """`"cuda" in types or wanted` also runs its body without CUDA: the body is ported as before."""
    source = (
        "import torch\ndef pick_device_type(types, wanted):\n    if 'cuda' in types or wanted:\n"
        "        return 'cuda'\n"
    )
    assert "'cuda'\n" not in fixed(source).split("wanted:")[1]


def test_a_loop_over_values_that_are_not_only_cuda_choices_is_ported():
    """A list that other code fills too (here a plain call) is no CUDA choice: its loop body is rewritten."""
    source = (
        "import torch\ndef run(inputs, graph):\n    to_move = pick_inputs(graph)\n    for i in to_move:\n"
        "        inputs[i] = inputs[i].cuda()\n"
    )
    assert ".cuda()" not in fixed(source)


def test_a_handler_registered_for_other_devices_too_is_ported():
    """`@register(torch.cuda.synchronize, torch.xpu.synchronize)` serves more than CUDA: no gate."""
    source = (
        "import torch\n@register(torch.cuda.synchronize, torch.xpu.synchronize)\ndef sync(tx):\n"
        "    torch.cuda.synchronize()\n"
    )
    assert "torch.accelerator.synchronize()" in fixed(source)


def test_a_value_read_where_nccl_is_rewritten_away_is_still_fixed():
    """The NCCL that keeps a value CUDA's is NCCL that stays: `init_process_group("nccl", device_id=device)`
    gets the device's own backend in the same run, so the device is rewritten too."""
    source = (
        "import torch\nimport torch.distributed as dist\ndef setup(rank):\n"
        "    device = torch.device(f'cuda:{rank}')\n"
        "    dist.init_process_group('nccl', device_id=device)\n"
    )
    after = fixed(source)
    assert "'cuda" not in after and "nccl" not in after, after


def test_cuda_device_context_takes_the_device_index():
    after = fixed(
        "import torch\ndef f(q):\n    with torch.cuda.device(q.device):\n        pass\n", ("NM106",)
    )
    assert "with torch.accelerator.device_index(q.device.index):" in after
    # an index needs an accelerator (`device_index(0)` raises on a CPU-only machine); None is the no-op
    assert "device_index(rank if torch.accelerator.is_available() else None)" in fixed(
        "import torch\nwith torch.cuda.device(rank):\n    pass\n", ("NM106",)
    )
    # an expression of unknown kind (int or device?) is left for a person
    source = "import torch\nwith torch.cuda.device(where):\n    pass\n"
    assert fixed(source, ("NM106",)) == source


def test_equality_with_a_bare_cuda_string_keeps_meaning_for_indexed_devices():
    source = "import torch\ndef f(device, x):\n    if device == 'cuda':\n        x = x.to(device)\n"
    after = fixed(source, ("NM105",))
    assert "if device in ('cuda', 'neuron'):" in after  # "cuda:1" and "meta" stay out, as before


def test_a_device_test_that_selects_a_choice_not_plumbing_is_an_unsafe_fix():
    """`== "cuda"` -> `in ("cuda", "neuron")` is safe around device plumbing; around a plain choice (a memory
    format, a list of LAPACK drivers) it is a CUDA-specific fact that neuron would now follow too."""
    choice = (
        "import torch\n"
        "def f(x, n):\n"
        "    memory_format = torch.channels_last\n"
        "    if x.device.type == 'cuda' and n < 16:\n"
        "        memory_format = torch.contiguous_format\n"
        "    return memory_format\n"
    )
    assert fixed(choice, ("NM105",)) == choice
    assert "in ('cuda', 'neuron')" in fixed(choice, ("NM105",), unsafe=True)
    skipped = (
        "import torch\n"
        "def samples(dtype, device):\n"
        "    if not (dtype == torch.bool and torch.device(device).type == 'cuda'):\n"
        "        yield 1\n"
    )
    assert fixed(skipped, ("NM105",)) == skipped  # neuron would skip the sample too, not only CUDA
    plumbing = "import torch\ndef f(x):\n    if x.device.type == 'cuda':\n        torch.cuda.synchronize()\n"
    assert "x.device.type in ('cuda', 'neuron')" in fixed(plumbing, ("NM105", "NM401"))


def test_cuda_gated_tests_cuda_named_classes_and_expected_errors_stay_as_they_are():
    source = (
        "import unittest\n"
        "import torch\n"
        "class CudaDdpTest(unittest.TestCase):\n"
        "    def test_a(self):\n"
        "        torch.cuda.synchronize()\n"
        "class T(unittest.TestCase):\n"
        "    @skip_if_lt_x_gpu(2)\n"
        "    def test_b(self):\n"
        "        torch.cuda.synchronize()\n"
        "    @unittest.skipIf(not TEST_CUDA, 'needs CUDA')\n"
        "    def test_c(self):\n"
        "        torch.cuda.synchronize()\n"
        "    def test_d(self):\n"
        "        with self.assertRaisesRegex(ValueError, 'Method cuda'):\n"
        "            module.cuda()\n"
    )
    assert fixed(source) == source
    for other in ("@skipIfRocm", "@skipCUDAIfNoMagma", "@unittest.skipIf(TEST_CUDA, 'not on CUDA')"):
        ungated = source.replace("@skip_if_lt_x_gpu(2)", other)
        assert fixed(ungated).count("torch.accelerator.synchronize()") == 1, other


# --- per-device chains written with the libraries' own helpers (accelerate, peft, transformers, trl) -------

_CHAIN = (
    "import torch\ndef default_device():\n    if {other}:\n        return torch.device('other')\n"
    "    elif torch.cuda.is_available():\n        return torch.device('cuda')\n"
    "    else:\n        return torch.device('cpu')\n"
)


@pytest.mark.parametrize(
    "other",
    [
        "is_npu_available()",
        "is_xpu_available(check_device=True)",
        "is_mlu_available()",
        "is_hpu_available(init_hccl=True)",
        "is_musa_available()",
        "is_sdaa_available()",
        "is_torch_xpu_available()",
        "is_torch_mlu_available()",
        "torch.xpu.is_available()",
        "state.distributed_type == DistributedType.MULTI_NPU",
    ],
)
def test_a_branch_of_a_chain_of_device_helpers_stays_cuda(other):
    """On an XPU/MLU/… machine a generic test would take the CUDA branch before the device's own."""
    source = _CHAIN.format(other=other)
    assert fixed(source) == source
    [check] = [f for f in findings(source) if f.code == "NM106"]
    assert "per-device chain" in check.message and "add a branch for `neuron`" in check.message


def test_a_chain_with_a_neuron_branch_needs_no_change():
    source = (
        "import torch\ndef default_device():\n    if is_npu_available():\n"
        "        return torch.device('npu')\n    elif torch.cuda.is_available():\n"
        "        torch.cuda.empty_cache()\n"
        "        return torch.device('cuda')\n"
        "    elif is_neuron_available():\n        return torch.device('neuron')\n"
        "    else:\n        torch.cuda.synchronize()\n"
    )
    assert fixed(source) == source
    found = findings(source)
    assert found and all(f.severity == "info" and "no change needed" in f.message for f in found), found


def test_memory_statistics_in_one_branch_of_a_chain_stay_cuda():
    source = (
        "import torch\nclass TorchTracemalloc:\n    def __enter__(self):\n"
        "        if torch.cuda.is_available():\n            torch.cuda.empty_cache()\n"
        "            torch.cuda.reset_max_memory_allocated()  # reset the peak gauge to zero\n"
        "            self.begin = torch.cuda.memory_allocated()\n"
        "        elif is_mlu_available():\n            torch.mlu.empty_cache()\n"
        "            self.begin = torch.mlu.memory_allocated()\n"
        "        return self\n"
    )
    assert fixed(source) == source


# --- code that only runs on CUDA by what it tests or requires ----------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        # NCCL only runs on CUDA: what runs under a test for it is CUDA's
        "import torch\ndef setup(self):\n    if self.backend == 'nccl' and use_fsdp:\n"
        "        self.backend = 'cuda:nccl,cpu:gloo'\n"
        "    torch.distributed.init_process_group(backend=self.backend)\n",
        "import torch\nimport torch.distributed as dist\nif dist.get_backend() == 'nccl':\n"
        "    torch.cuda.synchronize()\n",
        # a CUDA precondition: the code after `if <not CUDA>: raise` only runs on CUDA, and so does the code
        # before it in the function (it ends in that raise anywhere else)
        "import torch\ndef init_communicator(device=0):\n"
        "    device = torch.device('cuda', device) if isinstance(device, int) else torch.device(device)\n"
        "    if device.type != 'cuda':\n"
        "        raise NotImplementedError(f'NCCL weight transfer needs a CUDA device, got {device}')\n"
        "    if device.index is not None:\n        torch.cuda.set_device(device)\n",
        "import torch\nclass Client:\n    def init_communicator(self, device):\n"
        "        if torch.device(device).type != 'cuda':\n"
        "            raise NotImplementedError('NCCL only')\n"
        "if __name__ == '__main__':\n    client = Client()\n    client.init_communicator(device='cuda')\n"
        "    model = torch.nn.Linear(2, 2).to('cuda')\n",
        "import torch\ndef f(x):\n    for part in x:\n        if 'cuda' not in str(part.device):\n"
        "            raise ValueError('fused kernels need CUDA')\n        torch.cuda.synchronize()\n",
        # a precondition whose message says the code needs CUDA's capabilities (torch's roofline estimate)
        "import torch\ndef roofline(func):\n    if not torch.cuda.is_available():\n"
        "        raise AssertionError('Roofline estimation needs to access CUDA capabilities')\n"
        "    torch.cuda.synchronize()\n    return func()\n",
        "import torch\ndef g():\n    if not is_torch_cuda_available():\n        return None\n"
        "    return torch.cuda.current_device()\n",
        # `GPU` in a test that tells devices apart is CUDA, and so is code a comment says is CUDA-only
        "import torch\ndef check(state):\n    if state.distributed_type == DistributedType.MULTI_GPU:\n"
        "        return torch.cuda.get_rng_state()\n"
        "    elif state.distributed_type == DistributedType.MULTI_XPU:\n"
        "        return torch.xpu.get_rng_state()\n",
        "import torch\ndef autocast_type(state):\n"
        "    return 'cuda' if state.type == XLA and is_torch_xla_available(check_is_gpu=True) else 'cpu'\n",
        "import torch\ndef collect(weight):\n    # right now, only CUDA is implemented\n"
        "    device = torch.device('cuda', torch.cuda.current_device())\n    return weight.to(device)\n",
        # Dynamo's handlers of CUDA's own functions, and a helper only they call (from a lambda in it)
        "import torch\ndef handlers(register):\n    def helper(tx, prev):\n"
        "        tx.add_cleanup_hook(lambda: torch.cuda.set_device(prev))\n\n"
        "    @register(torch.cuda._exchange_device)\n    def exchange(tx, prev):\n"
        "        torch.cuda.synchronize()\n        return helper(tx, prev)\n",
        # a loop over what a function named after CUDA chose: torch's compiled autograd (cudagraph inputs)
        "import torch\nclass Compiler:\n    def end_capture(self, graph, cudagraphs):\n"
        "        to_move = []\n        if cudagraphs:\n"
        "            to_move = self.move_graph_nodes_to_cuda(graph)\n\n"
        "        def run(inputs):\n            for i in to_move:\n"
        "                inputs[i] = inputs[i].pin_memory().cuda(non_blocking=True)\n"
        "            return inputs\n\n        return run\n",
        # behind a test that a value names CUDA, a test no fix rewrites: torch's checkpoint device inference
        "import torch\ndef infer_device_type(types):\n    if not types:\n        return 'cpu'\n"
        "    elif 'cuda' in set(types):\n        return 'cuda'\n    return types[0]\n",
        "import torch\ndef svd_meta(A, Vh):\n    # Also makes sure this is CUDA or HIP:\n"
        "    if Vh.is_complex() and torch.cuda.is_available():\n        Vh = Vh.conj()\n    return Vh\n",
        # a function that asks NVIDIA's interconnect: torch's inductor models NVLink/InfiniBand topologies
        "import torch\ndef detect_interconnect(group_size):\n"
        "    per_node = torch.cuda.device_count() if torch.cuda.is_available() else 8\n"
        "    if group_size <= per_node and _has_nvlink():\n        return 'nvlink'\n    return 'ib'\n",
        # a comment that names NVIDIA's kernel templates: transformers' MSA attention (a CuTe-DSL kernel)
        "import torch\ndef attend(msa, q):\n    # CuTe-DSL kernel launches on the ambient current_device\n"
        "    with torch.cuda.device(q.device):\n        return msa.build(q)\n",
        # DeepSpeed-Inference's kernel injection is CUDA's (tortoise-tts)
        "import torch\ndef build(model, use_deepspeed):\n"
        "    if use_deepspeed and torch.cuda.is_available():\n        import deepspeed\n"
        "        engine = deepspeed.init_inference(model, replace_with_kernel_inject=True)\n"
        "        model = engine.module\n"
        "    return model\n",
        # a device check whose body opens with a comment naming the CUDA library it tunes for (sheeprl)
        "import torch\ndef setup(fabric, model):\n    if fabric.device.type == 'cuda':\n"
        "        # the convolutions of cuDNN run in the channels-last layout\n"
        "        model.to(memory_format=torch.channels_last)\n",
        "import torch\ndef setup(fabric, model):\n    if fabric.device.type == 'cuda':  # tensor cores\n"
        "        model.to(memory_format=torch.channels_last)\n",
        # a function that requires a CUDA-only library (imported unconditionally, or with a raise otherwise)
        "import torch\ndef dequantize(qweight, weight):\n    import bitsandbytes as bnb\n\n"
        "    compute_device = 'xpu' if is_xpu_available() else 'cuda'\n"
        "    dequantized = bnb.functional.dequantize_4bit(qweight.data, qweight.quant_state)\n"
        "    return weight.to(device=compute_device) - dequantized\n",
        "import torch\ndef loftq_init(weight):\n    if is_bnb_available():\n"
        "        import bitsandbytes as bnb\n    else:\n"
        "        raise ValueError('bitsandbytes is not available')\n"
        "    compute_device = 'xpu' if is_xpu_available() else 'cuda'\n"
        "    return bnb.nn.Params4bit(weight.to('cpu')).to(compute_device)\n",
    ],
)
def test_code_that_only_runs_on_cuda_by_what_it_needs_is_left_alone(source):
    assert fixed(source) == source


def test_a_comment_naming_a_cuda_library_counts_only_where_it_opens_the_body_of_the_check():
    tuned = (
        "import torch\ndef setup(fabric, model):\n    if fabric.device.type == 'cuda':\n"
        "        # channels-last: faster\n        model.to(memory_format=torch.channels_last)\n"
    )
    assert "fabric.device.type in ('cuda', 'neuron')" in fixed(tuned)
    above = tuned.replace("    if fabric", "    # cuDNN is tuned by the caller\n    if fabric")
    assert "fabric.device.type in ('cuda', 'neuron')" in fixed(above)
    assert fixed(tuned.replace("channels-last", "cuDNN: channels-last")) == tuned.replace(
        "channels-last", "cuDNN: channels-last"
    )


def test_gpu_where_devices_are_not_told_apart_means_any_accelerator():
    source = (
        "import torch\ndef setup(args):\n    if args.use_gpu:\n        torch.cuda.set_device(args.rank)\n"
    )
    assert "torch.accelerator.set_device_index(args.rank)" in fixed(source)


def test_a_function_that_only_may_use_a_cuda_only_library_is_still_fixed():
    source = (
        "import torch\nimport bitsandbytes as bnb\ndef make(model, eight_bit):\n    if eight_bit:\n"
        "        return bnb.optim.Adam8bit(model.parameters())\n    return model.cuda()\n"
    )
    assert "return model.to(" in fixed(source)


def test_a_precondition_message_that_names_nccl_keeps_the_check_cuda():
    source = (
        "import torch\ndef sync(device):\n    if device.type != 'cuda':\n"
        "        raise NotImplementedError('weight transfer runs on NCCL')\n    return device\n"
    )
    assert fixed(source) == source


# --- device-type tests around code whose CUDA-ness the fixes cannot see ------------------------------------

_MM = (
    "import torch\ndef _project(tile, hidden, w, dtype):\n"
    "    if _MM_OUT_DTYPE and tile.device.type == 'cuda' and dtype in (torch.float16, torch.bfloat16):\n"
    "        torch.mm(hidden, w, out_dtype=torch.float32, out=tile)\n"
    "    else:\n        torch.mm(hidden.float(), w.float(), out=tile)\n"
)


def test_a_device_type_test_around_unknown_code_is_an_unsafe_fix():
    assert fixed(_MM) == _MM
    [check] = [f for f in findings(_MM) if f.code == "NM105"]
    assert check.fix is not None and check.fix.safety == "unsafe"
    assert "torch.mm(" in check.message  # it names the code to check
    assert "tile.device.type in ('cuda', 'neuron')" in fixed(_MM, unsafe=True).replace('"', "'")


_ORT = (
    "import torch\ndef run(session, device, inputs):\n    on_gpu = device.type == 'cuda'\n"
    "    for name, leaf in inputs.items():\n        on_host = not (on_gpu and leaf.is_floating_point())\n"
    "        bind(name, (leaf.cpu() if on_host else leaf.to(device)).data_ptr())\n"
    "    if on_gpu:\n        torch.cuda.current_stream(device).synchronize()\n"
    "        session.synchronize_outputs()\n"
    "    return session.run()\n"
)


def test_a_device_type_test_kept_in_a_name_is_judged_by_what_the_name_selects():
    """`on_gpu` picks ONNX Runtime's CUDA I/O binding: made generic, neuron tensors would be bound as device
    pointers (ORT has no neuron provider), where the original copied them to the host. While the test stays
    CUDA's, the code it selects stays too (rewriting it alone was a half-migration a reviewer rejected)."""
    assert fixed(_ORT) == _ORT
    reviewed = fixed(_ORT, unsafe=True)
    assert "on_gpu = device.type in ('cuda', 'neuron')" in reviewed
    assert "torch.accelerator.current_stream(device)" in reviewed
    [check] = [f for f in findings(_ORT) if f.code == "NM105"]
    assert check.fix.safety == "unsafe" and "session.synchronize_outputs()" in check.message
    plumbing = "import torch\ndef pin(ids):\n    pinned = ids.device.type == 'cuda'\n    return pinned\n"
    assert fixed(plumbing).replace('"', "'") == plumbing.replace("== 'cuda'", "in ('cuda', 'neuron')")


def test_a_device_test_whose_cuda_branch_sets_the_tested_name_stays_cudas():
    """transformers' `if device_map == "cuda": device_map = f"cuda:{local_rank}"`: made generic, `"mps"` or
    `"xpu"` on a CUDA host would be replaced by the local CUDA device too (a change on CUDA)."""
    source = (
        "import os, torch\ndef load(device_map):\n    if device_map == 'cuda':\n"
        "        device_map = f'cuda:{os.environ[\"LOCAL_RANK\"]}'\n    return torch.device(device_map)\n"
    )
    assert fixed(source) == source
    check = next(f for f in findings(source) if f.code == "NM105")
    assert "sets `device_map` itself" in check.message


def test_a_device_type_test_that_is_part_of_a_name_is_judged_by_what_the_name_selects():
    """transformers' ExecuTorch export: a workaround for the ExecuTorch CUDA backend, kept in a name with
    other reasons to take it; made generic, every accelerator would take the eager attention path."""
    source = (
        "import torch\ndef patch(query, key, value, mask=None, **kwargs):\n"
        "    needs_eager = (query.device.type == 'cuda' and kwargs.get('gqa')) or mask is not None\n"
        "    if needs_eager:\n        return torch.matmul(query, key.transpose(-2, -1))\n    return None\n"
    )
    assert fixed(source) == source
    [check] = findings(source)
    assert check.fix.safety == "unsafe" and "torch.matmul(query" in check.message


@pytest.mark.parametrize(
    "source",
    [
        "import torch\ndef f(x):\n    if x.device.type == 'cuda':\n        torch.cuda.synchronize()\n",
        "import torch\ndef f(x):\n    if x.device.type == 'cuda':\n        x = x.pin_memory()\n"
        "        print('pinned', x.shape)\n    return x\n",
        "import torch\ndef f(x, device):\n    if device.type == 'cuda':\n"
        "        x = x.to(device, non_blocking=True)\n    return x\n",
        "import torch\ndef f(x):\n    return x.device.type == 'cuda'\n",
    ],
)
def test_a_device_type_test_around_device_plumbing_is_a_safe_fix(source):
    assert "in ('cuda', 'neuron')" in fixed(source)


def test_a_file_with_cuda_kernels_keeps_its_device_type_tests():
    source = (
        "import torch\nimport triton\ndef f(x):\n"
        "    use_kernel = x.device.type == 'cuda'\n    return use_kernel\n"
    )
    assert fixed(source) == source
    assert "in ('cuda', 'neuron')" in fixed(source, unsafe=True)


@pytest.mark.parametrize(
    ("other", "cue"),
    [
        ("def small(device):\n    return device == 'mps'\n", "mps"),
        ("FALLBACK = 'mps:0'\n", "mps"),
        ("from transformers import is_torch_xpu_available\n", "xpu"),
        ("def tiles(device):\n    return device.type == 'tpu'\n", "tpu"),  # Inductor's Pallas backend
        ("from transformers import is_torch_tpu_available\n", "tpu"),  # transformers' XLA alias
        ("BACKENDS = ('nccl', 'hccl')\n", "hccl"),  # HPU's collectives (torch's DTensor tests)
    ],
)
def test_a_module_that_chooses_by_other_accelerators_keeps_its_cuda_code_for_review(other, cue):
    """torch's `include_half=device.startswith("cuda")` beside an `"mps"` case, transformers' pinning for
    `device.type == "cuda"` where MPS is told apart, a cache emptied where CUDA is available. A fixed device
    test would send neuron into code written as CUDA's part of per-device code; the availability check, made
    generic, would send MPS and XPU there too. The fixes become unsafe; a CUDA seed after `torch.manual_seed`
    is a note."""
    source = (
        "import torch\n" + other + "def dtypes(device):\n    return device.startswith('cuda')\n"
        "def pin(x):\n    if x.device.type == 'cuda':\n        x = x.pin_memory()\n    return x\n"
        "def tidy():\n    if torch.cuda.is_available():\n        torch.cuda.empty_cache()\n"
        "def seed(s):\n    torch.manual_seed(s)\n    torch.cuda.manual_seed(s)\n"
    )
    assert fixed(source, target_torch=MEMORY_ON_MPS_FROM) == source
    told = [f for f in findings(source, target_torch=MEMORY_ON_MPS_FROM) if f"apart (`{cue}`)" in f.message]
    lines = source.splitlines()
    where = {
        n
        for n, line in enumerate(lines, 1)
        if ("'cuda'" in line or "is_available" in line) and line not in other
    }
    assert {f.line for f in told} == where  # the two tests, and the availability check
    assert all(f.fix is None or f.fix.safety == "unsafe" for f in told)
    assert sum("sends neuron there too" in f.message for f in told) == 2
    narrowed = ("startswith(('cuda', 'neuron'))", "in ('cuda', 'neuron')", "torch.accelerator.empty_cache()")
    reviewed = fixed(source, unsafe=True, target_torch=MEMORY_ON_MPS_FROM)
    assert all(text in reviewed for text in narrowed)
    alone = fixed(source.replace(other, ""), target_torch=MEMORY_ON_MPS_FROM)  # no other device: all safe
    assert all(text in alone for text in narrowed)


def test_a_module_that_lists_devices_together_or_serves_the_rest_after_them_is_fixed():
    """Other device types listed with CUDA's or neuron's treat the devices together (a precondition, a list
    of supported hardware); an `else` after other devices' branches only serves the devices without one.
    transformers' generation utilities list `["cuda", "xpu", "neuron", "tpu", "mps"]` and also test
    `device.type != "mps"` alone: that one keeps them apart."""
    for listed in ("DEVICES = ('xpu', 'neuron')\n", "OK = ['cuda', 'xpu', 'mps']\n"):
        source = "import torch\n" + listed + "def f():\n    torch.cuda.synchronize()\n"
        assert "torch.accelerator.synchronize()" in fixed(source, target_torch=MEMORY_ON_MPS_FROM)
        apart = source + "def g(d):\n    return d.type != 'mps'\n"
        assert "torch.accelerator.synchronize()" not in fixed(apart, target_torch=MEMORY_ON_MPS_FROM)
    # a bracket closed before the device string is not a list around it
    after_a_call = (
        "import torch\nt = torch.zeros(2, device='cuda')\nuse = t.device.type == 'mps' or f(1)\n"
        "def f(x):\n    torch.cuda.synchronize()\n"
    )
    assert "torch.accelerator.synchronize()" not in fixed(after_a_call, target_torch=MEMORY_ON_MPS_FROM)
    after_them = (
        "import torch\ndef f():\n    if is_xpu_available():\n        torch.xpu.empty_cache()\n"
        "    else:\n        torch.cuda.empty_cache()\n"
    )
    assert "torch.accelerator.empty_cache()" in fixed(after_them, target_torch=MEMORY_ON_MPS_FROM)


# --- what is left for a person, and what needs no change ---------------------------------------------------


def test_code_behind_a_check_that_stays_is_a_note_not_a_to_do():
    source = (
        "import torch\nif torch.cuda.is_available():\n    name = torch.cuda.get_device_name()\n"
        "    count = torch.cuda.device_count()\n"
    )
    check, count = (next(f for f in findings(source) if name in f.message) for name in ("is_av", "device_c"))
    assert check.severity == "error" and "keep this check CUDA's" in check.message
    assert _nesting(check.message) <= 1, check.message
    assert count.severity == "info" and "no change needed" in count.message
    assert "use `torch.accelerator`" not in count.message and _nesting(count.message) <= 1, count.message


def _nesting(message: str) -> int:
    """How deep parentheses nest in a message, outside `code`."""
    depth = deepest = 0
    for index, part in enumerate(message.split("`")):
        if index % 2:
            continue
        for char in part:
            depth += {"(": 1, ")": -1}.get(char, 0)
            deepest = max(deepest, depth)
    return deepest


def test_messages_say_no_automatic_fix_once():
    source = "import torch\ndef f(device):\n    if device.type in ('cuda', 'xpu'):\n        pass\n"
    [finding] = findings(source)
    assert "no automatic fix" not in finding.message


def test_a_membership_precondition_over_many_devices_is_not_a_cuda_one():
    source = (
        "import torch\ndef set_device(device):\n    if device not in ('cpu', 'gpu', 'xpu', 'neuron'):\n"
        "        raise ValueError(device)\n    torch.cuda.synchronize()\n"
    )
    assert "torch.accelerator.synchronize()" in fixed(source)


def test_the_test_of_a_version_guarded_if_is_no_old_torch_fallback():
    source = (
        "import torch\n_MM_OUT_DTYPE = Version(torch.__version__) >= Version('2.8.0')\n"
        "def addmm(acc, a, b):\n    if _MM_OUT_DTYPE and acc.device.type == 'cuda':\n"
        "        torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)\n"
    )
    [check] = [f for f in findings(source) if f.code == "NM105"]
    assert check.severity == "warning" and check.fix is not None and check.fix.safety == "unsafe"


# --- a device that is CUDA's by what its call pairs it with -------------------------------------------------

_DECORATE = "import unittest\nimport torch\nfrom torch.testing._internal.opinfo.core import DecorateInfo\n"


@pytest.mark.parametrize(
    ("source", "why"),
    [
        # the call's other arguments are about cuDNN / ROCm: `device_type="cuda"` means CUDA there
        (
            _DECORATE + "skips = (\n    DecorateInfo(unittest.expectedFailure, 'TestModule', 'test_grad',\n"
            "                 active_if=(TEST_CUDNN and not TEST_WITH_ROCM), device_type='cuda'),\n)\n",
            "pairs it with CUDA-only `TEST_CUDNN`",
        ),
        # one entry of a per-device choice: the module passes other device types to the same function
        (
            _DECORATE + "skips = (\n    DecorateInfo(unittest.skip('no'), 'TestModule', 'test_memory_format',"
            " device_type='cuda'),\n    DecorateInfo(unittest.skip('no'), 'TestModule', 'test_memory_format',"
            " device_type='mps'),\n)\n",
            "one entry of a per-device choice",
        ),
    ],
)
def test_a_device_its_call_pairs_with_cuda_facts_or_other_devices_needs_no_change(source, why):
    assert fixed(source) == source
    [note] = findings(source)
    assert note.severity == "info" and why in note.message, note.message


def test_a_device_paired_with_a_backend_keeps_its_check_cuda():
    """gloo only moves CPU and CUDA tensors: registering it for the accelerator would change what neuron
    runs; the check around the registration stays CUDA's, and a person pairs the accelerator with its own
    backend."""
    source = (
        "import torch\nfrom torch.distributed import ProcessGroup\ndef register(pg, backend_class):\n"
        '    pg._register_backend(torch.device("cpu"), ProcessGroup.BackendType.GLOO, backend_class)\n'
        "    if torch.cuda.is_available():\n"
        '        pg._register_backend(torch.device("cuda"), ProcessGroup.BackendType.GLOO, backend_class)\n'
        "    return pg\n"
    )
    assert fixed(source) == source
    device = next(f for f in findings(source) if f.code == "NM102")
    assert device.severity == "error" and "the `GLOO` backend" in device.message


def test_other_arguments_that_merely_name_a_gpu_file_do_not_pair():
    before = 'import torch\nstate = torch.load("gpu_model.pt", map_location="cuda")\n'
    assert fixed(before) == (
        "import torch\n"
        'device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")\n'
        'state = torch.load("gpu_model.pt", map_location=device)\n'
    )


def test_a_cuda_function_stored_in_a_table_is_left_alone():
    """A registry of functions (Dynamo's constant-folding list) or one device's entry of a dispatch table
    holds that very function: swapping it for the accelerator's would drop CUDA's entry."""
    source = (
        "import torch\nconstant_fold_functions = [\n    torch.accelerator.current_device_index,\n"
        "    torch.cuda.current_device,\n]\nBACKEND_DEVICE_COUNT = {}\n"
        'BACKEND_DEVICE_COUNT["xla"] = torch.cuda.device_count\n'
    )
    assert fixed(source) == source
    notes = findings(source)
    assert len(notes) == 2 and all("stored in a table, not called" in n.message for n in notes), notes
    assert fixed("import torch\ncount = torch.cuda.device_count\n") == (
        "import torch\ncount = torch.accelerator.device_count\n"
    )


@pytest.mark.parametrize(
    ("path", "source"),
    [
        # a package named after a CUDA library: its code only runs on CUDA
        (
            "torch/backends/cudnn/rnn.py",
            "import torch\ndef init_dropout_state():\n"
            '    return "desc_" + str(torch.cuda.current_device())\n',
        ),
        # a module named after the CUDA-only library it imports at its top level drives that library
        (
            "accelerate/utils/megatron_lm.py",
            "import torch\nif is_megatron_lm_available():\n    from megatron.core import mpu\n\n\n"
            "def get_batch(data):\n    return send_to_device(data, torch.cuda.current_device())\n",
        ),
        # a module in a folder named after a CUDA-only library: diffusers' bitsandbytes quantizer
        (
            "diffusers/quantizers/bitsandbytes/bnb_quantizer.py",
            "import torch\ndef update_device_map(device_map):\n"
            "    return {'': f'cuda:{torch.cuda.current_device()}'}\n",
        ),
        # ROCm drives AMD GPUs through torch.cuda; Triton and NVIDIA's libraries are GPU kernels
        ("torch/_inductor/codegen/rocm/bench.py", "import torch\nn = torch.cuda.device_count()\n"),
        ("ops/bmm/triton_impl.py", "import torch\nn = torch.cuda.device_count()\n"),
        ("ops/foreach_mm/nvmath_impl.py", "import torch\nn = torch.cuda.device_count()\n"),
        # TensorRT's runtime, by its folder (f5-tts) or its name
        ("runtime/triton_trtllm/benchmark.py", "import torch\nn = torch.cuda.device_count()\n"),
        ("export/trt_utils.py", "import torch\nn = torch.cuda.device_count()\n"),
        # a module whose docstring says it requires CUDA
        (
            "integrations/deepgemm.py",
            '"""DeepGEMM kernels.\n\nRequirements: CUDA, Hopper (SM90+).\n"""\nimport torch\n'
            "n = torch.cuda.device_count()\n",
        ),
    ],
)
def test_a_file_that_is_cuda_s_as_a_whole_is_left_alone(path, source):
    [device] = [f for f in findings(source, path=path) if f.code == "NM106"]
    assert device.severity == "info", device.message
    assert any(why in device.message for why in ("by its name", "CUDA-only library", "requires CUDA"))
    assert fixed(source, path=path) == source


def test_a_docstring_that_merely_mentions_cuda_says_nothing_about_the_module():
    docstring = '"""Runs on CUDA, and on the CPU when there is none."""\n'
    source = docstring + "import torch\nn = torch.cuda.device_count()\n"
    assert "torch.accelerator.device_count()" in fixed(source, path="utils.py")


def test_a_block_that_drives_a_cuda_only_library_stays_cudas():
    """transformers' `elif is_sagemaker_mp_enabled():` branch: SageMaker's model parallel library only runs
    on NVIDIA GPU instances, so moving its device to the accelerator is a half-migration."""
    source = (
        "import torch\nif is_sagemaker_mp_enabled():\n    import smdistributed.modelparallel.torch as smp\n"
        "def setup(args):\n    if args.cpu:\n        device = torch.device('cpu')\n"
        "    elif is_sagemaker_mp_enabled():\n        device = torch.device('cuda', smp.local_rank())\n"
        "        torch.cuda.set_device(device)\n    return device\n"
    )
    assert fixed(source) == source
    notes = [f for f in findings(source) if f.code in ("NM102", "NM106")]
    assert len(notes) == 2 and all("drives `smdistributed`" in n.message for n in notes), notes


def test_a_local_name_that_shadows_a_cuda_library_is_not_that_library():
    source = "import torch\ndef f():\n    from torch import cuda\n    return cuda.current_device()\n"
    assert "torch.accelerator.current_device_index()" in fixed(source)


def test_the_device_argument_of_a_registry_is_a_key_not_a_device():
    """torch's `register_interface_for_device("cuda", CudaInterface)` files CUDA's implementation: the
    accelerator's type there would file it for the CPU (or neuron)."""
    source = (
        "def register_interface_for_device(device, interface):\n    _registry[device] = interface\n"
        "def get_scheduling_for_device(device):\n    return _schedulers.get(device)\n"
        'register_interface_for_device("cuda", CudaInterface)\n'
        'if get_scheduling_for_device("cuda") is None:\n    register_backend_for_device(device="cuda")\n'
    )
    assert findings(source) == []


def test_a_module_that_only_imports_a_cuda_library_is_not_its_integration():
    source = (
        "import torch\nif is_megatron_lm_available():\n    from megatron.core import mpu\n\n\n"
        "def count():\n    return torch.cuda.device_count()\n"
    )
    assert "torch.accelerator.device_count()" in fixed(source, path="trainer.py")


def test_a_gpu_precondition_of_a_cuda_only_quantization_method_stays_cuda():
    """SpQR's kernels are CUDA-only: on neuron, "GPU is required" is the right error, not a failure deep in
    the kernel."""
    source = (
        "import torch\nclass SpQRHfQuantizer:\n    def validate_environment(self, *args, **kwargs):\n"
        "        if not torch.cuda.is_available():\n"
        '            raise RuntimeError("GPU is required to run SpQR quantized model.")\n'
    )
    assert fixed(source) == source
    [check] = findings(source)
    assert "keep this check CUDA's" in check.message


def test_what_a_cuda_test_heads_in_an_and_only_runs_on_cuda():
    source = (
        "import torch\ndef f(x):\n    fast = x.device.type == 'cuda' and fast_path_supported(x)\n"
        "    return fast\n"
    )
    assert fixed(source) == source
    [check] = findings(source)
    assert check.fix.safety == "unsafe" and "fast_path_supported(x)" in check.message


@pytest.mark.parametrize(
    "source",
    [
        # MAGMA is a CUDA (and ROCm) library
        "import torch\ndef f(device):\n"
        "    magma_254 = device.type == 'cuda' and _get_magma_version() >= (2, 5, 4)\n    return magma_254\n",
        # a comment that says the code is CUDA's, in other words
        "import torch\ndef f(device):\n    # pivot=False only supported in CUDA\n"
        "    pivots = (True, False) if torch.device(device).type == 'cuda' else (True,)\n    return pivots\n",
    ],
)
def test_magma_and_only_supported_in_cuda_comments_keep_a_test_cuda(source):
    assert fixed(source) == source


def test_an_assert_before_cuda_only_code_stays_a_cuda_precondition():
    kept = (
        "import torch\n"
        "def f():\n"
        "    assert torch.cuda.is_available()\n"
        "    torch.cuda.memory._record_memory_history(max_entries=100)\n"
    )
    assert fixed_until_stable(kept) == kept
    plain = "import torch\ndef f(x):\n    assert torch.cuda.is_available()\n    return x.sum()\n"
    assert "assert torch.accelerator.is_available()" in fixed_until_stable(plain)


def test_accelerates_multi_gpu_branch_is_cudas():
    source = (
        "import torch\n"
        "def f(state):\n"
        "    if state.distributed_type == DistributedType.MULTI_GPU:\n"
        "        return torch.cuda.device_count()\n"
        "    return state.num_processes\n"
    )
    assert fixed(source) == source


def test_cuda_functions_used_as_keys_or_passed_to_a_registry_keep_their_identity():
    """Dynamo registers handlers by function: rewriting `torch.cuda.synchronize` in `@register(...)` made it
    register `torch.accelerator.synchronize` twice, and every `torch.compile` failed."""
    source = (
        "import torch\n"
        "TABLE = {torch.cuda.synchronize: 'cuda', torch.xpu.synchronize: 'xpu'}\n"
        "@register(torch.accelerator.synchronize, torch.cuda.synchronize)\n"
        "def handle():\n"
        "    pass\n"
        "timer(sync=torch.cuda.synchronize)\n"
    )
    assert fixed_until_stable(source) == source
    reasons = [f.message for f in findings(source) if f.code == "NM401"]
    assert len(reasons) == 3 and sum("passed as a value" in r for r in reasons) == 2, reasons


def test_device_keyword_of_a_per_device_choice_stays_cudas():
    """`check_device(..., device="cuda") or check_device(..., device="xpu")`: the accelerator's type would be
    `cpu` on a CPU host and send CPU tensors through CUDA's thresholds."""
    source = (
        "import torch\n"
        "def should(a, b):\n"
        "    return check_device(a, b, device='cuda') or check_device(a, b, device='xpu')\n"
    )
    assert fixed_until_stable(source) == source


def test_vendored_copies_are_not_fixed(tmp_path):
    source = "import torch\ntorch.cuda.synchronize()\n"
    assert fixed(source, path="torch/_vendor/quack/autotuner.py") == source
    assert fixed(source, path="third_party/lib/sync.py") == source
    assert "torch.accelerator.synchronize()" in fixed(source, path="vendors_tools/sync.py")


def test_install_time_copies_are_not_fixed():
    """mmdet and mmseg ship `.mim/tools/` and `.mim/configs/`, copies of the repository's own folders that
    OpenMMLab's `mim` makes at install time: an edit there is lost on the next build (reviews 15 and 18)."""
    source = "import torch\ntorch.cuda.synchronize()\n"
    assert fixed(source, path="mmseg/.mim/tools/analysis_tools/benchmark.py") == source
    [finding] = findings(source, path="mmseg/.mim/tools/analysis_tools/benchmark.py")
    assert "an install-time copy (`.mim/`" in finding.message and "change the original" in finding.message


def test_code_a_kept_cuda_flag_selects_stays_cudas():
    """`on_gpu = device.type == "cuda" and HAS_ORT_CUDA` stays a CUDA check, so what `if on_gpu:` guards only
    runs on CUDA: rewriting it half-migrated the code (ONNX Runtime's runner in transformers)."""
    source = (
        "import torch\n"
        "def run(device, x):\n"
        "    on_gpu = device.type == 'cuda' and HAS_ORT_CUDA\n"
        "    if on_gpu:\n"
        "        torch.cuda.synchronize()\n"
        "    return x\n"
    )
    assert fixed_until_stable(source) == source


def test_a_function_that_calls_each_devices_own_module_keeps_cudas_part():
    """torch's `random.manual_seed` seeds CUDA, MPS and XPU each through its own module: made generic, CUDA's
    part would seed whatever the accelerator is, next to the other devices' parts."""
    source = (
        "import torch\ndef manual_seed(seed):\n    if not torch.cuda._is_in_bad_fork():\n"
        "        torch.cuda.manual_seed_all(seed)\n    if not torch.mps._is_in_bad_fork():\n"
        "        torch.mps.manual_seed(seed)\n"
    )
    assert fixed(source) == source
    [seed] = [f for f in findings(source) if f.code == "NM404"]
    assert "per-device code" in seed.message and "`torch.mps._is_in_bad_fork`" in seed.message


def test_a_rewritten_call_that_keeps_a_cuda_named_argument_keeps_its_check():
    """torch's `checkpoint_params`: `cuda_rng_state` is only saved under a CUDA check that stays; restoring it
    under `torch.accelerator.is_available()` raised NameError on every other accelerator."""
    source = (
        "import torch\ndef checkpoint(gm):\n    if torch.cuda.is_available():\n"
        "        cuda_rng_state = torch.cuda.get_rng_state()\n    def restore():\n"
        "        if torch.cuda.is_available():\n            torch.cuda.set_rng_state(cuda_rng_state)\n"
        "    return restore\n"
    )
    assert fixed(source) == source


@pytest.mark.parametrize(
    "test",
    [
        "torch.cuda.is_available() or (custom_device_mod and custom_device_mod.is_available())",
        "torch.cuda.is_available() or _is_privateuse1_backend_available()",
    ],
)
def test_a_test_that_also_takes_privateuse1_devices_already_takes_neuron(test):
    """torch's checkpoint writer: neuron registers as PrivateUse1, so the test takes it already; made
    generic, it would also take MPS into CUDA-and-PrivateUse1 code (`torch.mps.current_stream()`)."""
    source = f"import torch\ndef use_overlap():\n    return {test}\n"
    assert fixed(source) == source
    [check] = findings(source)
    assert "no change needed" in check.message


def test_what_a_flag_raised_under_a_cuda_test_selects_stays_with_the_test():
    """torch's AOTI minifier: `need_sync` only becomes True for a CUDA tensor, so the `synchronize()` it
    selects is CUDA's while that test stays (rewriting it alone was dead code on other devices)."""
    source = (
        "import torch\nfrom torch.cuda import synchronize\ndef run(args):\n    need_sync = False\n"
        "    for arg in args:\n        if arg.is_cuda:\n            need_sync = True\n"
        "    if need_sync:\n        synchronize()\n"
    )
    assert fixed(source) == source
    assert "torch.accelerator.synchronize()" in fixed(source, unsafe=True)


def test_a_helper_that_only_cuda_gated_tests_call_is_cudas():
    """distributed_test's `_test_*` helpers: their only callers run with CUDA, so a guard added there is
    redundant and the device calls need no change."""
    source = (
        "import torch\nclass T:\n    def _test_ddp(self, rank):\n        torch.cuda.set_device(rank)\n"
        "    @skip_if_lt_x_gpu(2)\n    def test_ddp(self):\n        self._test_ddp(self.rank)\n"
    )
    assert fixed(source) == source
    assert "only code that runs with CUDA calls its function" in findings(source)[0].message
    also_elsewhere = source + "T()._test_ddp(0)\n"  # a call outside a gated test: no longer CUDA's alone
    assert "set_device_index" in fixed(also_elsewhere)


def test_a_function_named_after_nccl_is_cudas():
    """torch's NCCL cost model (`_nccl_algo_time`): the device count there is the NCCL topology's."""
    source = "import torch\ndef _nccl_algo_time(size):\n    return size / torch.cuda.device_count()\n"
    assert fixed(source) == source


@pytest.mark.parametrize("owner", ["IsaaclabArenaEnv", "IsaacGymEnv", "isaac_sim_config"])
def test_code_for_nvidia_s_isaac_simulators_is_cudas(owner):
    """lerobot's Isaac Lab Arena env config: the simulator's device is a CUDA one (GPU PhysX)."""
    source = (
        f"import torch\nclass {owner}:\n    device: str = 'cuda:0' if torch.cuda.is_available() else 'cpu'\n"
    )
    assert fixed(source) == source
    assert fixed(source.replace(owner, "ArenaEnv")) != source


def test_a_stream_context_around_cuda_only_code_stays_cudas_and_names_that_code():
    """torch's RPC test: `torch.cuda._sleep` stays in the block, so `with s:` and the rewritten
    `current_stream` would be a half-migration; a block of plain device plumbing is still rewritten."""
    kept = (
        "import torch\ndef forward(self, x):\n"
        "    with torch.cuda.stream(torch.cuda.current_stream(self.device)):\n"
        "        torch.cuda._sleep(100)\n        return self.net(x)\n"
    )
    assert fixed(kept) == kept
    stream, inner = sorted(findings(kept, ["NM406"]), key=lambda f: f.col)
    assert "it guards CUDA-only code such as `torch.cuda._sleep`: keep this stream context CUDA's" in (
        stream.message
    )
    assert "behind a CUDA stream context that stays: no change needed" in inner.message
    plumbing = kept.replace("torch.cuda._sleep(100)", "x = x.to('cpu')")
    assert "with torch.accelerator.current_stream(self.device):" in fixed_until_stable(plumbing)


def test_an_argument_is_not_rewritten_while_the_same_call_keeps_a_cuda_device():
    """torch's `dump_chrome_trace(f, x, [ProfilerActivity.CUDA], devices=["cuda"])`: rewriting the activity
    alone leaves the call half CUDA's. A call whose other arguments say nothing about CUDA is fixed."""
    source = (
        "import torch\nfrom torch.profiler import ProfilerActivity\n"
        "def bench(f, x):\n    return trace(f, x, [ProfilerActivity.CUDA], runs=3, devices=['cuda'])\n"
    )
    assert fixed(source, unsafe=True) == source
    [finding] = findings(source, ["NM409"], unsafe=True)
    assert "the same call keeps CUDA's `devices=['cuda']`: change its arguments together" in finding.message
    plain = source.replace(", devices=['cuda']", "")
    assert "ProfilerActivity.CUDA" not in fixed(plain, unsafe=True)  # unsafe: no accelerator is certain there


@pytest.mark.parametrize(
    "sink",
    [
        "    os.environ['CUDA_VISIBLE_DEVICES'] = ','.join(map(str, range(n)))\n",
        "    env = {'CUDA_VISIBLE_DEVICES': str(n)}\n    run(env=env)\n",
    ],
)
def test_a_value_that_goes_to_a_cuda_setting_that_stays_stays_cudas(sink):
    """torch's AOT minifier picks `CUDA_VISIBLE_DEVICES` from `torch.cuda.device_count()`: counting the
    accelerator's devices while still selecting CUDA's is a half-migration."""
    source = "import os, torch\ndef launch(run):\n    n = torch.cuda.device_count()\n" + sink
    assert fixed(source, unsafe=True) == source
    [count] = [f for f in findings(source) if f.code == "NM106"]
    assert "its value goes to CUDA-only code that stays (`" in count.message
    assert "change them together" in count.message
    elsewhere = source.replace("(n)", "(0)").replace("range(n)", "range(1)")
    assert "torch.accelerator.device_count()" in fixed(elsewhere)


def test_a_cuda_setting_that_reads_the_name_before_the_assignment_does_not_read_its_value():
    source = (
        "import os, torch\ndef launch():\n    os.environ['CUDA_VISIBLE_DEVICES'] = str(n)\n"
        "    n = torch.cuda.device_count()\n    return n\n"
    )
    assert "torch.accelerator.device_count()" in fixed(source)


def test_a_device_test_that_reads_the_value_still_answers_it_right():
    """torch's `misc_patterns`: `device = "cuda"` then `if device.startswith("cuda"):` around CUDA-only
    patterns; the generic value takes neuron past them, as it should."""
    source = (
        "import torch\ndef register():\n    if torch.accelerator.is_available():\n        device = 'cuda'\n"
        "    else:\n        device = 'cpu'\n    if device.startswith('cuda'):\n        add_cuda_patterns()\n"
    )
    assert "device = 'cuda'" not in fixed(source).replace('"', "'")


def test_a_keyword_of_the_same_name_is_not_a_read_of_the_value():
    source = (
        "import os, torch\ndef launch():\n    n = torch.cuda.device_count()\n"
        "    os.environ['CUDA_VISIBLE_DEVICES'] = make(n=0)\n    return n\n"
    )
    assert "torch.accelerator.device_count()" in fixed(source)


@pytest.mark.parametrize(
    ("name", "about_cuda"),
    [
        ("jetson_utils.py", True),
        ("tegra_memory", True),
        ("IS_TEGRA", True),
        ("test_zero3_integration.py", False),  # "tegra" inside a word is not Tegra
        ("integrate", False),
    ],
)
def test_nvidia_embedded_platforms_are_about_cuda_by_name(name, about_cuda):
    from neuron_migrate.migrate.cuda_files import cuda_named

    assert cuda_named(name) is about_cuda


def test_a_device_passed_by_value_that_may_be_the_cpus_makes_the_accelerator_call_unsafe():
    """torch's PowerSGD hook: `if torch.cuda.is_available(): torch.cuda.synchronize(device)` with the
    bucket's device, the CPU's on a gloo process group. On a Trainium host the CUDA check skipped the call;
    `torch.accelerator.synchronize(cpu)` would raise there. An index or a CUDA call stays safe."""
    source = (
        "import torch\ndef hook(bucket):\n    device = bucket.buffer().device\n"
        "    used = torch.cuda.memory_allocated(device)\n    torch.cuda.synchronize(device=device)\n"
        "    return used\n"
    )
    assert fixed(source) == source
    risky = [f for f in findings(source) if f.code in ("NM401", "NM403")]
    assert len(risky) == 2
    assert all(f.fix.safety == "unsafe" and "`device` may be the CPU's device" in f.message for f in risky)
    plain = "import torch\ntorch.cuda.synchronize(0)\ntorch.cuda.synchronize(torch.cuda.current_device())\n"
    assert fixed(plain).count("torch.accelerator.synchronize(") == 2


_NUMA = (
    "import torch\ndef _gpu_count():\n    return torch.cuda.device_count()\n"
    "def _numa_node(index):\n    return torch.cuda.get_device_properties(index).pci_bus_id\n"
    "def gpus_on(node):\n    return {i for i in range(_gpu_count()) if _numa_node(i) == node}\n"
)


def test_a_device_count_stays_cudas_where_cuda_only_code_of_the_module_works_with_it():
    """torch's NUMA binding: `gpus_on` counts the devices with `_gpu_count()` and asks
    `torch.cuda.get_device_properties(i)` for each; the accelerator's count would feed CUDA's properties.
    Without a function that uses both, the count is free to move."""
    assert fixed(_NUMA) == _NUMA
    count = next(f for f in findings(_NUMA) if f.line == 3)
    assert (
        "works with its answer (`torch.cuda.get_device_properties(index)` in `_numa_node`): change them "
        "together" in count.message
    )
    assert count.tied and count.fix is None  # `fix` rewrites it once the properties call is changed
    alone = _NUMA.split("def gpus_on")[0]
    assert "return torch.accelerator.device_count()" in fixed(alone)


_PROFILER = (
    "import torch\n\n\nclass Profiler:\n    def __init__(self):\n"
    "        self.device_count = torch.cuda.device_count()\n\n    def export(self):\n        total = {}\n"
    "        for i in range(self.device_count):\n            with torch.cuda.device(i):\n"
    "                total[i] = torch.cuda.memory_allocated()\n        return total\n"
)


@pytest.mark.parametrize(("target", "tied"), [((2, 6), True), ((2, 13), False)])
def test_a_device_count_a_method_stores_stays_cudas_while_another_method_using_it_stays(target, tied):
    """spikingjelly's profiler (review 39 #17) stores `torch.cuda.device_count()` in `self.device_count`;
    `export()` loops over it with `torch.cuda.device(i)` and `torch.cuda.memory_allocated()`, whose fixes
    need torch 2.8 and 2.9 and are held back for its `torch>=2.6`. Rewritten alone, the count would be 1 on a
    Mac, and `torch.cuda.device(0)` raises there. With a torch that has them all, they change together."""
    count = next(f for f in findings(_PROFILER, target_torch=target) if f.line == 6)
    assert (count.fix is None) is tied
    assert ("works with its answer" in count.message) is tied
    other_class = _PROFILER.replace("    def export(self):", "class Other:\n    def export(self):")
    assert next(f for f in findings(other_class, target_torch=target) if f.line == 6).fix is not None


def test_an_availability_check_stays_cudas_where_it_runs_cuda_only_code_of_the_module():
    """torch's benchmark utilities run `_tensor_cores()`, which asks for the CUDA capability, under `if
    torch.cuda.is_available():`. A check whose `if` does not run that function only answers for itself
    (the bundled example's `bench.py` exits without an accelerator, then calls a report that prints
    `torch.version.cuda`), and a function that calls one with CUDA-only code does not hand it its answer."""
    helper = (
        "import torch\ndef _tensor_cores():\n    if torch.cuda.get_device_capability() >= (8, 0):\n"
        "        torch.set_float32_matmul_precision('high')\n"
    )
    gated = helper + "def run(model):\n    if torch.cuda.is_available():\n        _tensor_cores()\n"
    assert fixed(gated) == gated
    check = next(f for f in findings(gated) if f.line == 6)
    assert "(`torch.cuda.get_device_capability()` in `_tensor_cores`)" in check.message
    exits = helper + (
        "def main():\n    if not torch.cuda.is_available():\n        raise SystemExit('no GPU')\n"
        "    _tensor_cores()\n"
    )
    assert "if not torch.accelerator.is_available():" in fixed(exits)
    counts = helper + "def count():\n    _tensor_cores()\n    return torch.cuda.device_count()\n"
    assert "return torch.accelerator.device_count()" in fixed(counts)


_REGION = (
    "import torch\nclass Region:\n    @property\n    def _device(self):\n"
    "        return torch.device(self._type, torch.cuda.current_device())\n"
    "    def seed(self, states):\n        if self._device.type == 'cuda':\n"
    "            return states[self._device.index]\n        else:\n            return states['cpu']\n"
)


def test_a_current_device_read_by_a_cuda_or_cpu_test_of_its_class_stays_cudas():
    """torch's `_local_tensor`: the `_device` property is read by `if self._device.type == "cuda": ...
    else:` (the CPU's RNG state), a test left for a person; an accelerator's device would take the CPU's
    path. A test without `else` only adds work for CUDA (torch's `ShardedTensor.to`), and the same name in
    another class is another method: neither holds the fix back."""
    assert fixed(_REGION) == _REGION
    current = next(f for f in findings(_REGION) if f.code == "NM106")
    assert "(`self._device.type == 'cuda'` in `seed`)" in current.message
    no_else = _REGION.replace(
        "        else:\n            return states['cpu']\n", "        return states['cpu']\n"
    )
    assert "torch.accelerator.current_device_index()" in fixed(no_else)
    elsewhere = _REGION.replace("    def seed(self, states):", "class Other:\n    def seed(self, states):")
    assert "torch.accelerator.current_device_index()" in fixed(elsewhere)


def test_a_placement_stays_cudas_in_a_function_that_takes_a_list_of_vendors_for_an_accelerator():
    """peft's DoRA: `lora_B.to("cuda")` in the `else` of an XPU check, while `a.device.type in ["cuda",
    "xpu"]` decides which tensors are on an accelerator; a neuron tensor would be taken for a host one. A
    list that names neuron already takes Trainium in: nothing to flag, and the chain has neuron's branch."""
    source = (
        "import torch\ndef place(a, b):\n    if a.device.type in ['cuda', 'xpu']:\n"
        "        b = b.to(a.device)\n    else:\n        b = b.to('cuda')\n    return a.to(b.device), b\n"
    )
    assert fixed(source) == source
    placement = next(f for f in findings(source) if f.code == "NM101")
    assert "its function takes `a.device.type in ['cuda', 'xpu']` for the test of an accelerator" in (
        placement.message
    )
    with_neuron = source.replace("'xpu']", "'xpu', 'neuron']")
    assert not [f for f in findings(with_neuron) if "list of device types" in f.message]


def test_a_module_that_defines_kernels_with_a_cuda_only_library_keeps_its_cuda_calls():
    """speechbrain's transducer loss is numba.cuda kernels (`@cuda.jit`): its `torch.cuda.empty_cache()` frees
    memory those kernels used, and a generic call serves no other device. A module that only imports the
    library (bitsandbytes for one optional optimizer) keeps its fixes."""
    body = (
        "\n\n@cuda.jit\ndef kernel(a):\n    pass\n\n\ndef loss(x):\n    torch.cuda.empty_cache()\n"
        "    return x\n"
    )
    kernels = next(f for f in findings("import torch\nfrom numba import cuda" + body) if f.code == "NM402")
    assert kernels.fix is None and "defines `numba.cuda` kernels" in kernels.message
    imported_only = "import torch\nfrom numba import cuda\n\n\ndef loss(x):\n    torch.cuda.empty_cache()\n"
    assert next(f for f in findings(imported_only) if f.code == "NM402").fix is not None


@pytest.mark.parametrize(
    "source",
    [
        "import pytest\nimport torch\n\n\n"
        "@pytest.mark.skipif(not torch.cuda.is_available(), reason='no cuda')\n"
        "@pytest.mark.parametrize('device', ['cpu', 'cuda'])\ndef test_moves(device):\n    assert device\n",
        "import pytest\nimport torch\n\n\ndef test_amp(mixed_precision):\n"
        "    if mixed_precision != 'no' and not torch.cuda.is_available():\n"
        "        pytest.skip('device does not support it')\n"
        "    assert mixed_precision\n",
        "import unittest\nimport torch\n\n\nclass T(unittest.TestCase):\n    def test_x(self):\n"
        "        if not torch.cuda.is_available(): self.skipTest('device does not support it')\n"
        "        self.assertTrue(True)\n",
    ],
)
def test_a_check_that_decides_whether_a_test_runs_gets_an_unsafe_fix(source):
    """skorch's tests skip without CUDA and then test CUDA (`'cuda'` parameters, a patched
    `torch.cuda.is_available`): made generic, they would run and fail on MPS and XPU CI runners."""
    check = next(f for f in findings(source) if f.code == "NM106")
    assert check.fix is not None and check.fix.safety == "unsafe", check.message
    assert "it decides whether a test runs" in check.message


def test_code_under_a_skip_gate_this_run_leaves_cuda_is_left_too():
    """skorch's `test_multioutput_forward_device_gpu`: its `skipif(not torch.cuda.is_available())` keeps
    CUDA (the fix is unsafe), so its `device='cuda:0'` only runs on CUDA: a note, where `--unsafe-fixes`,
    which rewrites the gate, rewrites the device too."""
    source = (
        "import pytest\nimport torch\n\n\n"
        "@pytest.mark.skipif(not torch.cuda.is_available(), reason='no cuda device')\n"
        "def test_forward_gpu(net, X):\n    assert net.forward(X, device='cuda:0')\n"
    )
    device = next(f for f in findings(source) if f.code == "NM101")
    assert device.fix is None and "a test decorator runs it only with CUDA" in device.message
    assert next(f for f in findings(source, unsafe=True) if f.code == "NM101").fix is not None


def test_a_library_a_helper_imports_by_name_is_known_by_the_name_it_binds():
    """MONAI's GPUDirect Storage dataset: `cp, has_cp = optional_import("cupy")`, then `with
    cp.cuda.Device(self.device):` around code that builds `f"cuda:{self.device}"` tensors from cupy arrays.
    The import is reported, and the block that drives cupy keeps its CUDA device."""
    source = (
        "import torch\nfrom monai.utils import optional_import\n\ncp, has_cp = optional_import('cupy')\n\n\n"
        "def load(path, device):\n    with cp.cuda.Device(device):\n"
        "        data = cp.fromfile(path)\n        return torch.as_tensor(data, device=f'cuda:{device}')\n"
    )
    found = {f.code: f for f in findings(source)}
    assert "NM701" in found and "`cupy`" in found["NM701"].message
    assert found["NM101"].fix is None and "cupy" in found["NM101"].message


@pytest.mark.parametrize(
    "load",
    [
        "    map_location = None if torch.cuda.is_available() else torch.device('cpu')\n"
        "    return torch.load(path, map_location=map_location)\n",
        "    return torch.load(path, map_location='cpu' if not torch.cuda.is_available() else None)\n",
    ],
)
def test_a_map_location_of_none_only_cuda_can_restore_keeps_its_cuda_check(load):
    """MONAI's pretrained HoVerNet and TransChex: `None` loads a GPU checkpoint back onto CUDA, the CPU
    anywhere else. Made generic, the check passes on neuron and `torch.load` fails to restore CUDA tensors."""
    check = next(f for f in findings(f"import torch\n\n\ndef load(path):\n{load}") if f.code == "NM106")
    assert check.fix is None and "map_location=None" in check.message and check.severity == "info"


def test_another_choice_with_none_is_an_ordinary_check():
    source = "import torch\n\n\ndef pick():\n    index = None if torch.cuda.is_available() else 0\n"
    assert next(f for f in findings(source) if f.code == "NM106").fix is not None


def test_a_count_and_ed_with_a_cuda_test_that_stays_waits_for_it():
    """ignite: `torch.cuda.device_count() > 1 and "cuda" in idist.device().type` only holds on CUDA:
    counting every accelerator there changes nothing until the test changes. (ignite wraps the model in
    `DataParallel` there, which is CUDA's too: NM305, and the check guards it.)"""
    source = (
        "import torch\n\n\ndef wrap(model, device):\n"
        '    if torch.cuda.device_count() > 1 and "cuda" in device.kind:\n'
        "        model = replicate(model)\n    return model\n"
    )
    count = next(f for f in findings(source) if f.code == "NM106")
    assert count.fix is None and count.tied and '"cuda" in device.kind' in count.message
    wrapped = source.replace("replicate(model)", "torch.nn.DataParallel(model)")
    count = next(f for f in findings(wrapped) if f.code == "NM106")
    assert (
        count.fix is None
        and "it guards CUDA-only code such as `torch.nn.DataParallel(model)`" in count.message
    )


def test_a_test_skipped_below_two_cuda_devices_keeps_its_cuda_code():
    """opacus' multi-device tests: `@unittest.skipIf(torch.cuda.device_count() < 2, ...)` runs them only with
    two CUDA devices, so a generic body could never run anywhere else (review 18: 14 hunks, class d). With
    `--unsafe-fixes` the gate itself becomes generic, and the body with it."""
    source = (
        "import unittest\nimport torch\n\n\nclass T(unittest.TestCase):\n"
        "    @unittest.skipIf(torch.cuda.device_count() < 2, 'Need at least 2 GPUs')\n"
        "    def test_multi(self):\n        return torch.device('cuda:1')\n"
    )
    assert fixed(source) == source
    body = next(f for f in findings(source) if f.code == "NM102")
    assert "a test decorator runs it only with CUDA" in body.message
    assert "torch.cuda.device_count" not in fixed(source, unsafe=True)


def test_a_check_around_pinning_memory_gets_an_unsafe_fix():
    """torchani pins its in-memory datasets when CUDA is available: `Tensor.pin_memory()` raises on MPS
    (torch's DataLoader turns pinning off there), so a generic check would break Apple hosts. A flag that only
    reaches `DataLoader(pin_memory=...)` stays safe, and another function's parameter of the same name is
    another flag."""
    source = (
        "import torch\n\n\ndef make(ds, pin_memory=None):\n    if pin_memory is None:\n"
        "        pin_memory = torch.cuda.is_available()\n    if pin_memory:\n        ds.pin_memory()\n"
        "    return ds\n\n\ndef loader(ds, pin_memory=None):\n    if pin_memory is None:\n"
        "        pin_memory = torch.cuda.is_available()\n"
        "    return torch.utils.data.DataLoader(ds, pin_memory=pin_memory)\n"
    )
    safety = {f.line: f.fix.safety for f in findings(source) if f.code == "NM106"}
    assert safety == {6: "unsafe", 14: "safe"}
    pinned = next(f for f in findings(source) if f.code == "NM106")
    assert "pins host memory (`ds.pin_memory()`), which raises on MPS" in pinned.message


@pytest.mark.parametrize(
    ("sync", "mps_cannot"),
    [
        ("torch.cuda.current_stream().synchronize()", True),
        ("stream = torch.cuda.current_stream()\n        stream.synchronize()", True),
        ("torch.cuda.default_stream().query()", True),
        ("torch.cuda.synchronize()", False),  # `torch.accelerator.synchronize()` works on MPS
    ],
)
@pytest.mark.parametrize(
    "assign",
    ["non_blocking = torch.cuda.is_available()", "non_blocking, _ss = torch.cuda.is_available(), -1"],
)
def test_a_check_around_a_stream_synchronization_is_not_safe(assign, sync, mps_cannot):
    """MONAI's sliding-window inference (review 39): `non_blocking = torch.cuda.is_available()`, then `if
    non_blocking: torch.cuda.current_stream().synchronize()`. torch 2.13's MPS backend cannot synchronize
    or query a stream (the base class's `synchronizeStream` raises), so a generic flag sends Macs into an
    error where they skipped the wait. A device-wide synchronize is fine there."""
    source = (
        f"import torch\n\n\ndef infer(x):\n    {assign}\n"
        f"    y = x * 2\n    if non_blocking:\n        {sync}\n    return y\n"
    )
    check = next(f for f in findings(source) if f.code == "NM106")
    assert ("synchronizes or queries a stream" in check.message) is mps_cannot
    assert (check.fix is not None and check.fix.safety == "safe") is not mps_cannot


@pytest.mark.parametrize(
    ("moved", "mps_cannot"),
    [
        ("ratios.cuda()", True),  # fairseq: `ratios = torch.DoubleTensor(ratios)` above
        ("torch.ones(2, dtype=torch.float64).cuda()", True),
        ("weights.double().to('cuda')", True),
        ("weights.cuda()", False),
        ("weights.to('cuda')", False),
    ],
)
def test_a_check_around_moving_float64_data_to_the_device_is_not_safe(moved, mps_cannot):
    """MPS has no float64: a check made generic around a move of float64 data sends Apple hosts into an
    error where the CPU branch used to run."""
    source = (
        "import torch\n\n\ndef sync(ratios, weights):\n    ratios = torch.DoubleTensor(ratios)\n"
        f"    if torch.cuda.is_available():\n        return {moved}\n    return ratios\n"
    )
    check = next(f for f in findings(source) if f.code == "NM106")
    assert ("moves float64 data to the device" in check.message) is mps_cannot
    assert (check.fix is not None and check.fix.safety == "safe") is not mps_cannot


@pytest.mark.parametrize(
    ("line", "marker"),
    [
        ("dtype = torch.float64", "torch.float64"),
        ("x = x.double()", "x.double()"),
        ('calc(default_dtype="float64")', '"float64"'),  # MACE's calculators
        ("y = x.to(torch.double)", "torch.double"),
        ("# float64 would be more precise", None),  # a comment, a docstring, another dtype: not float64 code
        ('"""Not float64: float32."""', None),
        ("x = x.to(torch.float32)", None),
    ],
)
def test_a_device_choice_in_a_function_that_works_in_float64_is_unsafe(line, marker):
    """MPS has no float64: where the choice picked the CPU, it now picks MPS on Apple hosts. The CUDA test
    inside the choice waits for it (it is part of the choice, not code behind it), and `--unsafe-fixes`
    writes both."""
    source = (
        f"import torch\n\n\ndef run(x):\n    {line}\n"
        "    device = 'cuda' if torch.cuda.is_available() else 'cpu'\n    return x.to(device)\n"
    )
    choice = next(f for f in findings(source) if f.code == "NM105")
    test = next(f for f in findings(source) if f.code == "NM106")
    if marker is None:
        assert choice.fix.safety == "safe", choice.message
        assert "torch.accelerator.current_accelerator" in fixed(source)
        return
    assert choice.fix.safety == "unsafe"
    assert f"the function works in float64 (`{marker}`)" in choice.message
    assert test.fix is None and "it is part of the CUDA check `'cuda' if" in test.message, test.message
    assert fixed(source) == source
    assert "torch.cuda" not in fixed(source, unsafe=True)


def test_an_attribute_flag_guards_its_tests_in_every_method():
    """torchrl's `_rng_decorator`: `self.has_cuda = torch.cuda.is_available()` in `__init__`, tested in
    `_get_state`; a plain name's tests are its own function's, an attribute's are every method's."""
    source = (
        "import torch\n\n\nclass Rng:\n    def __init__(self):\n"
        "        self.has_cuda = torch.cuda.is_available()\n\n    def state(self):\n"
        "        if self.has_cuda:\n            return torch.cuda.get_device_properties(0)\n"
    )
    assert fixed(source) == source
    check = next(f for f in findings(source) if f.code == "NM106")
    assert "get_device_properties" in check.message


def test_a_cuda_call_on_what_is_on_cuda_already_is_left_with_its_test():
    """ludwig's 8-bit workaround: `model.cuda()` on a model found on CUDA moves nothing; it runs for
    bitsandbytes' `Int8Params.cuda()`, which re-quantizes and which `.to()` skips. Widening the test and
    rewriting the call would break the workaround on CUDA."""
    source = (
        "def reload(model, ecd):\n"
        '    if model.kind == "llm" and model.model.device.type == "cuda":\n'
        "        model.model.cuda()\n"
        '    elif ecd.device.type == "cuda":\n'
        "        ecd.cuda()\n"
        "    model.to_gpu = model.cuda()\n"
        "    if not ecd.is_cuda:\n"  # torchrl: moved because it is not on CUDA
        "        ecd = ecd.cuda()\n"
    )
    got = findings(source)
    calls = [f for f in got if f.code == "NM103"]
    assert [f.line for f in calls] == [3, 5, 6, 8]
    assert all("is on CUDA already here" in f.message and f.fix is None for f in calls[:2])
    assert all(f.fix is None for f in got if f.line < 6)
    assert calls[2].fix is not None and "on CUDA already" not in calls[3].message


def test_code_for_the_accelerator_waits_for_the_device_choice_its_class_keeps_cuda():
    """simpletransformers: `__init__` sets `self.device` under a CUDA check that stays (it raises "use_cuda
    set to True when cuda is unavailable"); `train()` reads that device through a helper, so its generic
    autocast would serve a model that never leaves CUDA or the CPU. It waits for the device choice."""
    source = (
        "import torch\n\n\nclass Model:\n"
        "    def __init__(self, use_cuda=True, cuda_device=-1):\n"
        "        if use_cuda:\n"
        "            if torch.cuda.is_available():\n"
        '                self.device = torch.device(f"cuda:{cuda_device}")\n'
        "            else:\n"
        '                raise ValueError("use_cuda set to True when cuda is unavailable")\n'
        "        else:\n"
        '            self.device = "cpu"\n\n'
        "    def _move(self, batch):\n        return batch.to(self.device)\n\n"
        "    def train(self, batch):\n"
        "        with torch.cuda.amp.autocast():\n"
        "            return self._move(batch)\n"
    )
    (autocast,) = [f for f in findings(source) if f.code == "NM201"]
    assert (
        autocast.tied and "which its class sets in `__init__` from CUDA code that stays" in autocast.message
    )
    assert "torch.cuda.amp.autocast()" in fixed(source)
    generic = source.replace(
        "        if use_cuda:\n            if torch.cuda.is_available():\n"
        '                self.device = torch.device(f"cuda:{cuda_device}")\n            else:\n'
        '                raise ValueError("use_cuda set to True when cuda is unavailable")\n'
        '        else:\n            self.device = "cpu"\n',
        '        self.device = "cuda" if torch.cuda.is_available() else "cpu"\n',
    )
    assert "torch.cuda.amp.autocast()" not in fixed(generic)


def test_a_check_waits_for_the_cuda_code_that_sets_the_state_it_reads():
    """GLiNER's memory estimator: `measure()` keeps `torch.cuda.mem_get_info()` for a person (held back for
    the torch it needs) and sets `self.total = total` from it; `budget()` reads `self.total` under a check
    whose generic form would compute a budget from a total never measured off CUDA."""
    source = (
        "import torch\n\n\nclass Memory:\n"
        "    def measure(self):\n"
        "        if not torch.cuda.is_available():\n            return\n"
        "        free, total = torch.cuda.mem_get_info()\n"
        "        self.total = total\n\n"
        "    def budget(self):\n"
        "        if not torch.cuda.is_available():\n            return 0\n"
        "        return self.total // 2\n"
    )
    held = findings(source)
    (check,) = [f for f in held if f.line == 12]
    assert check.tied and "it reads `self.total`, which its class sets in `measure`" in check.message
    unrelated = source.replace("return self.total // 2", "return 1")
    (check,) = [f for f in findings(unrelated) if f.line == 12]
    assert check.fix is not None and not check.tied


def test_code_waits_for_the_streams_its_class_keeps_in_a_dict_behind_a_cuda_check():
    """fairscale's FSDP fills `self._streams["all_gather"]` with `torch.cuda.Stream()` in `_setup_streams`
    under a CUDA check that stays (a stream kept in a dict is an unsafe fix), so the early exit of
    `_wait_for_previous_optim_step` made generic would read an empty dict on neuron (KeyError); it waits."""
    source = (
        "import torch\n\n\nclass FSDP:\n"
        "    def _setup_streams(self):\n"
        "        if torch.cuda.is_available():\n"
        '            self._streams["all_gather"] = torch.cuda.Stream()\n\n'
        "    def _wait(self):\n"
        "        if not torch.cuda.is_available():\n            return\n"
        '        self._streams["all_gather"].wait_stream(torch.cuda.current_stream())\n'
    )
    waiting = [f for f in findings(source) if f.line in (10, 12)]
    assert [f.code for f in waiting] == ["NM106", "NM406"]
    assert all(
        f.tied and "it reads `self._streams`, which its class sets in `_setup_streams`" in f.message
        for f in waiting
    )
    assert fixed(source) == source


def test_entering_a_stream_waits_for_the_cuda_stream_its_class_keeps():
    """fairscale's offload shards make `torch.cuda.Stream(device=...)` in `__init__` beside a
    `torch.cuda.device(...)` left for a person: `with torch.cuda.stream(self.copy):` would become `with
    self.copy:`, still a CUDA stream. It waits; a stream the method is given is rewritten (unsafe: it may be
    anything)."""
    source = (
        "import torch\n\n\nclass Shard:\n"
        "    def __init__(self, device):\n"
        "        torch.cuda.device(device)\n"
        "        self.copy = torch.cuda.Stream(device=device)\n\n"
        "    def load(self):\n        with torch.cuda.stream(self.copy):\n            pass\n\n"
        "    def other(self, s):\n        with torch.cuda.stream(s):\n            pass\n"
    )
    entered = {f.line: f for f in findings(source) if f.code == "NM406" and f.line in (10, 14)}
    assert entered[10].tied and "in `__init__` for a person, on the same `self.copy`" in entered[10].message
    assert entered[14].fix is not None and not entered[14].tied


def test_a_stream_attribute_is_one_unit_across_the_methods_of_its_class():
    """LAVIS's PrefetchLoader makes `self.stream` in `__init__` and waits for it in `next`, while `preload`
    keeps `with torch.cuda.stream(self.stream):` around a CUDA-only copy: the three change together. A stream
    attribute no kept code uses is rewritten."""
    source = (
        "import torch\n\n\nclass PrefetchLoader:\n"
        "    def __init__(self):\n        self.stream = torch.cuda.Stream()\n\n"
        "    def preload(self, batch):\n        with torch.cuda.stream(self.stream):\n"
        "            self.batch = move_to_cuda(batch)\n\n"
        "    def next(self):\n        torch.cuda.current_stream().wait_stream(self.stream)\n"
    )
    waiting = [f for f in findings(source) if f.line in (6, 13)]
    assert len(waiting) == 2 and all(f.tied for f in waiting)
    assert all(
        "its class keeps `torch.cuda.stream(self.stream)` in `preload` for a person, on the same "
        "`self.stream`" in f.message
        for f in waiting
    )
    plain = source.replace("self.batch = move_to_cuda(batch)", "self.batch = batch")
    assert "torch.cuda" not in fixed(plain)


def test_rng_states_wait_for_a_fork_that_lists_its_devices():
    """fairscale's pipe checkpointing restores the device generator inside `torch.random.fork_rng(devices)`,
    which forks only the listed devices (fairscale lists the device only when it is CUDA's): rewritten alone,
    the restored neuron state would outlive the block. Without a list, torch 2.13 forks every device of the
    current accelerator, and the states are rewritten."""
    source = (
        "import torch\n\n\ndef save(device):\n    return torch.cuda.get_rng_state(device)\n\n\n"
        "def restore(devices, state, device):\n"
        "    with torch.random.fork_rng(devices):\n"
        "        torch.cuda.set_rng_state(state, device)\n"
    )
    states = [f for f in findings(source) if f.code == "NM405"]
    assert len(states) == 2 and all(f.fix is None for f in states)
    assert all("forks the generators with `torch.random.fork_rng(devices)`" in f.message for f in states)
    unlisted = source.replace("fork_rng(devices)", "fork_rng()")
    assert "torch.cuda" not in fixed(unlisted) and "fork_rng()" in fixed(unlisted)
    assert "torch.cuda" not in fixed(source.replace("fork_rng(devices)", "fork_rng(devices=None)"))


def test_torch_forks_the_current_accelerator_s_generators_by_default():
    """The fact the rewrite above and NM101's `fork_rng(device_type="cuda")` fix stand on."""
    import inspect

    import torch

    source = inspect.getsource(torch.random.fork_rng)
    assert "torch.accelerator.current_accelerator()" in source
    assert inspect.signature(torch.random.fork_rng).parameters["device_type"].default is None


def test_a_gpu_named_list_is_not_a_gpu_query():
    """`gpu_devices.append(device)` under `if device.type == "cuda":` (fairscale's pipe checkpointing) names
    a list, not a GPU capability query such as `is_torch_bf16_gpu_available()`: the test is a choice made
    for CUDA (an unsafe fix), not a check that guards CUDA-only code."""
    source = (
        "import torch\n\n\ndef devices(device):\n    gpu_devices = []\n"
        '    if device.type == "cuda":\n        gpu_devices.append(device)\n    return gpu_devices\n'
    )
    (test,) = [f for f in findings(source) if f.code == "NM105"]
    assert test.fix is not None and test.fix.safety == "unsafe", test.message
    assert "guards CUDA-only code" not in test.message


def test_a_module_that_builds_its_own_cuda_kernels_keeps_its_cuda_code():
    """ColBERT's residual codec compiles `decompress_residuals.cu` with `cpp_extension.load` and moves its
    tensors to CUDA for those kernels: the moves are left with them. A module that builds C++ alone is
    fixed."""
    source = (
        "from torch.utils.cpp_extension import load\n\n"
        'ext = load(name="codec", sources=["codec.cpp", "codec.cu"])\n\n\n'
        "def decode(t):\n    return ext.decode(t.cuda())\n"
    )
    (move,) = [f for f in findings(source) if f.code == "NM103"]
    assert move.fix is None and "builds its own CUDA kernels (`codec.cu`" in move.message
    cpu_only = source.replace(', "codec.cu"', "")
    (move,) = [f for f in findings(cpu_only) if f.code == "NM103"]
    assert move.fix is not None


def test_a_model_wrapped_with_cuda_device_ids_holds_no_method_back():
    """super-gradients: `self.net = DistributedDataParallel(self.net, device_ids=[rank])` keeps an unsafe fix
    for its `device_ids`; the attribute is still the model, which every method reads, so the guarded cache
    release in another method is fixed."""
    source = (
        "import torch\n\n\nclass Trainer:\n"
        "    def wrap(self, rank):\n"
        "        self.net = torch.nn.parallel.DistributedDataParallel(self.net, device_ids=[rank])\n\n"
        "    def quantize(self):\n"
        "        self.net.eval()\n"
        "        torch.cuda.empty_cache()\n"
    )
    (release,) = [f for f in findings(source) if f.code == "NM402"]
    assert release.fix is not None and not release.tied


def test_a_test_for_a_device_missing_here_is_left_for_a_person():
    """chemprop rebuilds a checkpoint's metric `if not torch.cuda.is_available() and metric.device.type !=
    "cpu"`: it asks whether the CUDA device the metric was saved on is missing. `torch.accelerator` would say
    an accelerator is there on a Trainium host, where CUDA is missing too (review 31: 8 hunks, class b). A
    test of something else (`args.fp16`) is an ordinary check."""
    source = (
        "import torch\n\n\ndef load(metric):\n"
        "    if not torch.cuda.is_available() and metric.device.type != 'cpu':\n"
        "        return rebuild(metric)\n    return metric\n"
    )
    (check,) = findings(source)
    assert (
        check.fix is None and "with `metric.device.type != 'cpu'` it asks about the device" in check.message
    )
    assert fixed(source) == source
    other = source.replace("metric.device.type != 'cpu'", "metric.stale")
    assert "torch.accelerator.is_available()" in fixed(other)
    # axolotl's LoRA merge keeps the caller's device (`"cuda"` by default) only where CUDA is
    kept = (
        "import torch\n\n\ndef merge(device):\n"
        "    return device if device != 'cpu' and torch.cuda.is_available() else 'cpu'\n"
    )
    assert fixed(kept) == kept


def test_a_function_that_declares_its_device_cpu_or_cuda_keeps_its_choice():
    """fairchem's `load_predict_unit(device: Literal["cuda", "cpu"] | None = None)` chooses `"cuda" if
    torch.cuda.is_available() else "cpu"` for its predict unit, which asserts `device in ["cpu", "cuda"]`
    (review 31, class b). Without the declaration the choice is rewritten."""
    source = (
        "from typing import Literal\n\nimport torch\n\n\n"
        'def load(device: Literal["cuda", "cpu"] | None = None):\n'
        "    if device is None:\n"
        '        device = "cuda" if torch.cuda.is_available() else "cpu"\n'
        "    return device\n"
    )
    choice = next(f for f in findings(source) if f.code == "NM105")
    assert (
        choice.fix is None and 'its function declares its device `Literal["cuda", "cpu"]`' in choice.message
    )
    assert fixed(source) == source
    free = source.replace('device: Literal["cuda", "cpu"] | None = None', "device=None")
    assert "torch.accelerator" in fixed(free)


def test_a_check_around_loading_a_checkpoint_as_saved_is_unsafe():
    """mmagic's DeblurGAN-v2 loads `torch.load(pretrained)` with CUDA and `map_location='cpu'` without:
    made generic, a Trainium host would load CUDA-saved tensors as saved and fail (review 31, class b). With
    `map_location` on both sides the check is safe."""
    source = (
        "import torch\n\n\ndef load(pretrained):\n    if torch.cuda.is_available():\n"
        "        state = torch.load(pretrained)\n    else:\n"
        "        state = torch.load(pretrained, map_location='cpu')\n    return state\n"
    )
    (check,) = findings(source)
    assert check.fix.safety == "unsafe" and "loads a checkpoint as it was saved" in check.message
    mapped = source.replace("torch.load(pretrained)\n", "torch.load(pretrained, map_location='cuda')\n")
    assert next(iter(findings(mapped))).fix.safety == "safe"


def test_a_class_that_tests_its_profiler_activities_keeps_the_cuda_activity_with_that_test():
    """nequip's profiler callback appends `ProfilerActivity.CUDA` in one method and sorts its summary by CUDA
    time in another when the list has it: the activity alone would leave the summary sorting by CPU time on
    any other accelerator (review 37, half a migration)."""
    source = (
        "import torch\n\n\nclass Profiler:\n    def __init__(self):\n"
        "        self.activities = [torch.profiler.ProfilerActivity.CPU]\n"
        "        if torch.cuda.is_available():\n"
        "            self.activities.append(torch.profiler.ProfilerActivity.CUDA)\n\n"
        "    def summary(self, prof):\n"
        "        cuda = torch.profiler.ProfilerActivity.CUDA in self.activities\n"
        '        return prof.key_averages().table(sort_by="cuda_time_total" if cuda else "cpu_time_total")\n'
    )
    assert fixed(source, unsafe=True) == source
    (appended,) = [f for f in findings(source) if f.code == "NM409" and f.line == 8]
    assert "its class keeps `torch.profiler.ProfilerActivity.CUDA` in `summary`" in appended.message
    alone = source[: source.index("\n    def summary")] + "\n"
    assert "ProfilerActivity.CUDA" not in fixed(alone)  # no test of the activities: the activity is rewritten


@pytest.mark.parametrize(
    "setting",
    [
        'torch.backends.fp32_precision = "tf32"',
        'torch.set_float32_matmul_precision("high")',
    ],
)
def test_a_check_around_a_process_wide_float32_precision_stays_cudas(setting):
    """fairseq2 sets `torch.backends.fp32_precision = "tf32"` after `if not torch.cuda.is_available():
    return`, d3rlpy `set_float32_matmul_precision("high")` under `if torch.cuda.is_available():`: in torch
    2.13 both also switch oneDNN's CPU matmuls and convolutions, so a check widened to any accelerator changes
    CPU results on other accelerators' hosts (reviews 37 and 38, class b)."""
    head = "import torch\ndef numerics():\n    if not torch.cuda.is_available():\n        return\n"
    source = f"{head}    {setting}\n"
    assert fixed(source, unsafe=True) == source
    (check,) = [f for f in findings(source) if f.line == 3]
    assert "keep this check CUDA's" in check.message


@pytest.mark.parametrize(
    ("message", "kept"),
    [
        ("GaussianMixtureModel is currently implemented for CUDA.", True),
        ("this op only supports CUDA tensors", True),
        ("needs a GPU", False),  # people say so of any accelerator
        ("CUDA is required", False),
    ],
)
def test_a_check_whose_raise_says_the_code_is_cuda_only_stays(message, kept):
    """MONAI's GaussianMixtureModel (review 39 #42) raises "currently implemented for CUDA" without CUDA,
    then builds a CUDA extension: a generic check would send neuron into the CUDA build. The check and the
    code after it stay CUDA's; a message that only asks for a GPU does not say that."""
    source = (
        "import torch\n\n\nclass G:\n    def __init__(self, n):\n        if not torch.cuda.is_available():\n"
        f"            raise NotImplementedError({message!r})\n"
        "        self.n = n\n        torch.cuda.synchronize()\n"
    )
    assert (fixed(source) == source) is kept
    check = next(f for f in findings(source) if f.code == "NM106")
    assert ("the check says the code after it is CUDA's" in check.message) is kept


_POLICY = (
    "import torch\n\n\nclass Policy:\n    def __init__(self, device_type):\n"
    "        self.device_type = device_type\n\n"
    '    def create_grad_scaler(self):\n        if self.device_type != "cuda":\n            return None\n'
    '        try:\n            return torch.amp.GradScaler("cuda")\n        except AttributeError:\n'
    "            return {fallback}\n\n    def describe(self):\n"
    '        return {{"grad_scaler": self.device_type == "cuda"}}\n'
)


@pytest.mark.parametrize(
    ("fallback", "tied"),
    [("torch.cuda.amp.GradScaler()", True), ("None", False)],
)
def test_a_device_test_used_as_a_value_changes_with_the_same_test_in_its_class(fallback, tied):
    """spikingjelly's precision policy (review 39 #16): `describe()` reports `self.device_type == "cuda"` as
    whether a grad scaler is used, and `create_grad_scaler()` returns None unless `self.device_type ==
    "cuda"`, a test that stays CUDA's with its scaler (and the fallback for a torch without
    `torch.amp.GradScaler`). Widened alone, the report would say neuron gets a scaler it never gets; where
    the scaler's test changes, both do."""
    source = _POLICY.format(fallback=fallback)
    report = next(f for f in findings(source) if f.code == "NM105" and f.line == 17)
    assert (report.fix is None) is tied
    assert ("`create_grad_scaler` keeps the same test CUDA's" in report.message) is tied


_HELPER = (
    "import torch\n\nSTATES = {}\n\n\ndef _save(path):\n    STATES[path] = torch.cuda.get_rng_state()\n\n\n"
    "def train(path):\n    if not torch.cuda.is_available():\n        raise RuntimeError('needs CUDA')\n"
    "    graph = torch.cuda.CUDAGraph()\n    _save(path)\n"
)


@pytest.mark.parametrize(
    ("change", "tied"),
    [
        ((), True),
        (("_save", "save"), False),  # a public name may have users elsewhere
        (("    _save(path)\n", "    _save(path)\n\n\nHOOKS = [_save]\n"), False),  # used at the top level too
        (("    graph = torch.cuda.CUDAGraph()\n", ""), False),  # `train`'s check is rewritten: both change
    ],
)
def test_a_private_helper_only_a_cuda_function_uses_waits_for_it(change, tied):
    """spikingjelly's `_save_checkpoint` (review 39 #5-#7) is only called by `train_classification`, which
    raises without CUDA and keeps CUDA graphs, so its check stays CUDA's: the helper only runs on CUDA, and
    its rewrite alone would be half a migration."""
    source = _HELPER.replace(*change) if change else _HELPER
    rng = next(f for f in findings(source) if f.code == "NM405")
    assert (rng.fix is None) is tied
    assert ("uses it, which keeps its CUDA check" in rng.message) is tied


@pytest.mark.parametrize(("keyword", "unsafe"), [("gpu", True), ("use_gpu", True), ("jit", False)])
def test_a_device_test_passed_as_a_gpu_flag_is_not_safe(keyword, unsafe):
    """pytorch-metric-learning passes `gpu=self.device.type == "cuda"` to its `FaissKMeans`, which asks faiss
    for NVIDIA GPUs (review 39 #24): what a callee does on its GPU path with neuron is the callee's. (A
    keyword that says CUDA, `on_cuda=`, already keeps the test CUDA's.)"""
    source = (
        "import torch\n\n\ndef build(device, KMeans):\n"
        f'    return KMeans(niter=20, {keyword}=device.type == "cuda")\n'
    )
    [test] = findings(source, ("NM105",))
    assert (test.fix.safety == "unsafe") is unsafe
    assert (f"its value is the `{keyword}=` argument of `KMeans(...)`" in test.message) is unsafe


def test_an_availability_check_that_decides_a_gpu_switch_is_not_safe():
    """torchao's k-means codebook passes `gpu=True if torch.cuda.is_available() else False` to
    `faiss.Kmeans` (review 40 #168): faiss's GPU is CUDA's. A check that only reaches the switch through a
    call of its own (`pick(...)`) is not the switch."""
    source = (
        "import faiss\nimport torch\n\n\ndef train(d, k):\n"
        "    return faiss.Kmeans(d, k, gpu=True if torch.cuda.is_available() else False)\n\n\n"
        "def seeded(d, k):\n    return faiss.Kmeans(d, k, seed=pick(torch.cuda.is_available()))\n"
    )
    checks = {f.line: f for f in findings(source, ("NM106",))}
    assert checks[6].fix.safety == "unsafe" and "`gpu=` argument of `faiss.Kmeans(...)`" in checks[6].message
    assert checks[10].fix.safety == "safe"


@pytest.mark.parametrize(
    ("use", "unsafe"),
    [
        ("    for is_cuda in options:\n        m = fuse(m, is_cuda=is_cuda)\n", True),
        ("    m = fuse(m, use_gpu=options)\n", True),
        ("    for is_cuda in options:\n        m = fuse(m, strict=is_cuda)\n", False),  # not a GPU switch
        ("    for flag in other:\n        m = fuse(m, is_cuda=flag)\n", False),  # another name
    ],
)
def test_a_check_whose_name_reaches_a_gpu_switch_is_not_safe(use, unsafe):
    """torchao's PT2E QAT fusion (review 40 #172, #179): `is_cuda_options = [True, False] if
    torch.cuda.is_available() else [False]`, then each option is passed as `is_cuda=`, and the helper moves
    its pattern inputs with `.cuda()`: made generic, every XPU, MPS and neuron host reaches that `.cuda()`."""
    source = (
        "import torch\n\n\ndef fuse_all(m, other):\n"
        "    options = [True, False] if torch.cuda.is_available() else [False]\n" + use + "    return m\n"
    )
    [check] = findings(source, ("NM106",))
    assert (check.fix.safety == "unsafe") is unsafe
    assert ("argument of `fuse(...)`" in check.message) is unsafe


_GATED_MODULE = (
    "import pytest\nimport torch\n\n\ndef _is_sm_10x():\n"
    "    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 10\n\n\n"
    "{gate}\n\n\ndef test_kernel():\n    x = torch.ones(4, device='cuda')\n    assert x.sum() == 4\n"
)


@pytest.mark.parametrize(
    ("gate", "gated"),
    [
        (
            "if not (torch.cuda.is_available() and _is_sm_10x()):\n"
            "    pytest.skip('Requires CUDA SM 10.x', allow_module_level=True)",
            True,
        ),
        ("pytestmark = pytest.mark.skipif(not _is_sm_10x(), reason='needs an SM100 GPU')", True),
        ("pytestmark = [pytest.mark.skipif(not _is_sm_10x(), reason='needs Blackwell')]", True),
        ("pytestmark = pytest.mark.skipif(not _is_sm_10x(), reason='needs a GPU')", False),
        ("if not _is_sm_10x():\n    print('slow without a GPU')", False),
    ],
)
def test_a_test_module_skipped_without_cuda_stays_cudas(gate, gated):
    """torchao's MoE kernel tests skip the whole module unless CUDA SM 10.x (or MI300) is there (review 40):
    its tests only run on that hardware, and a generic device would only send them to hosts they skip
    anyway. A skip whose reason asks for any GPU, or code that does not skip, is not such a gate."""
    source = _GATED_MODULE.format(gate=gate)
    placement = next(f for f in findings(source) if f.code == "NM101")
    assert (placement.fix is None) is gated
    # a module-level `if` that skips is a precondition like `if not ...: raise`: the code after it is its
    module_wide = "the test module only runs with CUDA"
    assert (
        ("behind a CUDA check that stays" if gate.startswith("if") else module_wide) in placement.message
    ) is gated


@pytest.mark.parametrize(
    ("decorator", "gated"),
    [
        ('@unittest.skipIf(not _is_fp8_sdpa_available(), "FP8 SDPA requires CUDA and FA3")', True),
        ('@unittest.skipUnless(_is_hopper(), "Requires PyTorch >= 2.11, Hopper GPU, and FA3")', True),
        ('@unittest.skipIf(_is_hopper(), "flaky on CUDA")', False),  # skipped on CUDA: runs elsewhere
        ('@unittest.skipIf(not _has_accelerator(), "needs an accelerator")', False),
    ],
)
def test_a_skip_decorator_whose_reason_names_cuda_hardware_is_a_cuda_gate(decorator, gated):
    """torchao's FP8 attention tests gate on helper predicates (`_is_hopper()`, `_is_fp8_sdpa_available()`)
    whose reason says what they need: CUDA, Hopper (review 40 #48-#116)."""
    source = (
        f"import unittest\nimport torch\n\n\nclass T(unittest.TestCase):\n    {decorator}\n"
        "    def test_it(self):\n        x = torch.ones(4, device='cuda')\n"
    )
    placement = next(f for f in findings(source) if f.code == "NM101")
    assert (placement.fix is None) is gated
    assert ("a test decorator runs it only with CUDA" in placement.message) is gated


@pytest.mark.parametrize(
    ("decorator", "gated"),
    [
        ("@requiresCUDA", True),  # lightning-thunder's own decorator (review 43)
        ("@framework.requiresNVFuser", True),
        ("@requires_cuda_graphs", True),
        ("@cuda_only", True),
        ("@requires_grad_check", False),
    ],
)
def test_a_project_decorator_named_for_cuda_is_a_cuda_gate(decorator, gated):
    """A decorator of the project's own that says it needs CUDA (thunder's `@requiresCUDA` skips unless
    `torch.cuda.is_available()`, review 43: 42 tests rewritten for nothing) runs the test only with CUDA."""
    source = f"import torch\n\n\n{decorator}\ndef test_it():\n    x = torch.ones(4, device='cuda')\n"
    placement = next(f for f in findings(source) if f.code == "NM101")
    assert (placement.fix is None) is gated
    assert ("a test decorator runs it only with CUDA" in placement.message) is gated


@pytest.mark.parametrize("skip", ["pytest.skip('needs CUDA')", "self.skipTest('needs CUDA')"])
def test_code_after_a_skip_without_cuda_that_stays_is_cudas(skip):
    """`if not torch.cuda.is_available(): pytest.skip(...)` is a precondition, as a `return` or `raise`
    would be: while the check stays CUDA's (its reason names CUDA), the test's code after it only runs on
    CUDA, and rewriting it would change nothing (review 43)."""
    source = (
        "import pytest\nimport torch\n\n\nclass T:\n    def test_it(self):\n"
        f"        if not torch.cuda.is_available():\n            {skip}\n"
        "        x = torch.ones(4, device='cuda')\n"
    )
    check, placement = sorted(findings(source), key=lambda f: f.line)
    assert check.fix is None and placement.fix is None
    assert "behind a CUDA check that stays" in placement.message


def test_a_test_that_calls_cuda_and_cpu_itself_tests_the_methods():
    """torchao's `test_device1_to_device2` moves a tensor subclass with `.to(device=...)`, `.to(...)`,
    `.cuda()` and `.cpu()` in turn (review 40 #180): rewritten, CUDA runs would no longer cover `.cuda()`.
    A test that keeps what `.cuda()` returns, or has no bare `.cpu()`, is ordinary device code."""
    source = (
        "import torch\n\n\nclass T:\n    def test_device1_to_device2(self, make, d1):\n"
        "        make(d1).cuda()\n        make(d1).cpu()\n\n    def test_other(self, x):\n"
        "        x.cuda()\n        y = x.cpu()\n\n"
        "    def helper(self, x):\n        x.cuda()\n        x.cpu()\n"
    )
    fixes = {f.line: f.fix for f in findings(source, ("NM103",))}
    assert fixes[6] is None and fixes[10] is not None and fixes[14] is not None


_TEST_MODULE = (
    'import torch\n\n_DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n\n\n'
    "def test_x():\n    x = torch.ones(2, device=_DEVICE)\n"
)


@pytest.mark.parametrize(
    ("path", "cautioned"), [("test_parq.py", True), ("parq_test.py", True), ("parq.py", False)]
)
def test_a_test_modules_device_at_its_top_is_not_safe(path, cautioned):
    """torchao's PARQ tests pick `_DEVICE` at the module's top; every test places on it and
    `skipIf(_DEVICE == "cpu", ...)` tests it (review 40 #117). Made generic, the suite moves to MPS and XPU
    hosts' accelerator where it ran on the CPU: a person decides, as for a skip condition."""
    assert (fixed(_TEST_MODULE, path=path) == _TEST_MODULE) is cautioned
    choice = next(f for f in findings(_TEST_MODULE, path=path, unsafe=True) if f.code == "NM105")
    assert ("it picks the device of a test module's tests (`_DEVICE`" in choice.message) is cautioned


def test_a_module_level_if_with_a_nested_block_is_analysed():
    """torchao's FSDP2/TP test opens with `if ...: pytest.skip(...)` blocks; a module-level `if` whose body
    holds another compound statement made the module-skip reader iterate a block (an NM903 analysis failure
    for the whole file, found in the reread)."""
    source = (
        "import pytest\nimport torch\n\nif flag:\n    if other:\n"
        "        pytest.skip('no', allow_module_level=True)\n\nx = torch.ones(2, device='cuda')\n"
    )
    assert not [f for f in findings(source) if f.code.startswith("NM9")]


def test_a_check_in_a_message_that_names_cuda_says_so():
    """`log.info(f"Cuda Available? {torch.cuda.is_available()}")` guards nothing: its string is not CUDA-only
    code, but the message would call another accelerator CUDA (lm-eval, review 43)."""
    source = (
        "import torch\n\n\ndef report(log):\n    log.info(f'Cuda Available? {torch.cuda.is_available()}')\n"
    )
    [check] = findings(source)
    assert (
        check.fix is None
        and "part of a message that names CUDA or GPUs (`Cuda Available? `)" in check.message
    )
    assert "guards CUDA-only code" not in check.message


@pytest.mark.parametrize(
    ("parametrize", "fixed_test"),
    [
        ('@pytest.mark.parametrize("device", ["cuda", "mps", "cpu"])', False),
        ('@pytest.mark.parametrize("device, dtype", [("cuda", 1), ("cpu", 2)])', False),
        ('@pytest.mark.parametrize("device", ["cuda", "neuron"])', True),
        ('@pytest.mark.parametrize("device", DEVICES)', True),
    ],
)
def test_a_device_test_of_a_parameter_that_never_takes_neuron_is_left(parametrize, fixed_test):
    """IOPaint's `sd_cpu_textencoder=device == "cuda"` under `parametrize("device", ["cuda", "mps", "cpu"])`
    (review 44 #13): `in ("cuda", "neuron")` there is dead code."""
    source = (
        f"import pytest\nimport torch\n\n\n{parametrize}\ndef test_it(device, dtype=None):\n"
        "    build(cpu_encoder=device == 'cuda')\n"
    )
    [check] = findings(source)
    assert (check.fix is not None) is fixed_test
    assert ("`parametrize` values that do not name neuron" in check.message) is not fixed_test


def test_a_check_kept_cudas_says_so_instead_of_the_rules_advice():
    """ "let neuron in (`x.device.type in ("cuda", "neuron")`)" followed by "keep this check CUDA's" was two
    contrary pieces of advice in one message (review 45: 20 items)."""
    source = (
        "import torch\n\n\ndef f(x):\n    if x.device.type == 'cuda':\n"
        "        torch.cuda.nvtx.range_push('a')\n    return x\n"
    )
    check = next(f for f in findings(source) if f.code == "NM105")
    assert check.message.startswith("CUDA-only device test, false on Trainium: it guards CUDA-only code")
    assert "let neuron in" not in check.message


def test_a_check_whose_code_names_cuda_only_in_text_says_so():
    """`info["GPU number"] = ...` or `print("Using CUDA")` under the check is not CUDA-only code, but
    rewritten, the text would speak of CUDA on other accelerators (llamafactory, review 44); code that names
    CUDA is reported before text that does."""
    text_only = (
        "import torch\n\n\ndef env(info):\n    if torch.cuda.is_available():\n"
        "        info['GPU number'] = 2\n    return info\n"
    )
    [check] = findings(text_only)
    assert "the code it guards names CUDA or GPUs in its text (`GPU number`)" in check.message
    code_too = text_only.replace(
        "info['GPU number'] = 2", "print('on GPU')\n        info['n'] = cuda_count()"
    )
    [check] = findings(code_too)
    assert "it guards CUDA-only code such as `cuda_count`" in check.message


def test_a_name_that_keeps_a_checks_answer_is_named_as_such():
    """tensordict's `is_cuda = device_type == "cuda"` and `self.__dict__["_has_cuda_val"] = val` keep the
    check's answer under a name that says CUDA: the check stays CUDA's, and the reason says where the answer
    goes, not that it "guards CUDA-only code such as `is_cuda`" (review 48)."""
    source = (
        "import torch\n\n\ndef parse(device):\n    device_type = torch.device(device).type\n"
        '    is_cuda = device_type == "cuda"\n    if is_cuda:\n'
        "        return torch.device(device_type, torch.cuda.current_device())\n    return device\n\n\n"
        "class TD:\n    def has_cuda(self):\n        val = self.__dict__.get('_has_cuda_val')\n"
        "        if val is None:\n            val = torch.cuda.is_available()\n"
        "            self.__dict__['_has_cuda_val'] = val\n        return val\n"
    )
    kept = {f.line: f for f in findings(source) if f.code in ("NM105", "NM106") and f.fix is None}
    assert "its answer is kept as `is_cuda`, a name that says CUDA" in kept[6].message
    assert "its answer is kept as `_has_cuda_val`, a name that says CUDA" in kept[16].message


def test_a_test_that_excludes_cuda_in_an_and_says_what_neuron_would_skip():
    """`if recorder.marked and device.type != "cuda": recorder.record_transfer(device)` (tensordict, review
    48): the body runs off CUDA only. Fixed (`not in ("cuda", "neuron")`), neuron skips it as CUDA does; the
    finding said the test is false on Trainium, that neuron "would run" the body, and that its own `"cuda"`
    was CUDA text the body names."""
    source = (
        "import torch\n\n\ndef record(value, device: torch.device, recorder):\n"
        '    if recorder.marked and device.type != "cuda":\n'
        "        recorder.record_transfer(device)\n    return value.to(device)\n"
    )
    [check] = [f for f in findings(source, unsafe=True) if f.code == "NM105"]
    assert check.message.startswith("CUDA-only device test, true on Trainium")
    assert "what it skips on CUDA (`recorder.record_transfer(device)`)" in check.message
    assert "neuron would run" not in check.message and "in its text" not in check.message
    assert 'device.type not in ("cuda", "neuron")' in fixed(source, unsafe=True)


def test_a_check_tested_with_a_name_that_says_cuda_names_it_as_such():
    """`"cuda" if use_cuda else "cpu"` and `not args.no_cuda and torch.cuda.is_available()` stay CUDA's for
    the name beside the check, which the reason calls what it is, not "CUDA-only code such as `use_cuda`"
    (review 48); a capability gate (`x.is_cuda and flash_ok`) still names the code behind it."""
    source = (
        "import torch\n\n\ndef main(args, use_cuda):\n"
        '    device = torch.device("cuda" if use_cuda else "cpu")\n'
        "    args.cuda = not args.no_cuda and torch.cuda.is_available()\n    return device\n"
    )
    kept = {f.line: f.message for f in findings(source) if f.fix is None}
    assert "it is tested with `use_cuda`, a name that says CUDA" in kept[5]
    assert "it is tested with `args.no_cuda`, a name that says CUDA" in kept[6]


@pytest.mark.parametrize("floor", ["2.9", "2.1"])
def test_a_guard_around_cudnn_flags_only_needs_no_change(run_cli, tmp_path, floor):
    """nnunetv2's and moshi's `if torch.cuda.is_available(): cudnn.benchmark = True` (review 49): the flags
    work on every device, so the guard guards nothing; it said "keep this check CUDA's and give other devices
    their own path" (held back for nnunetv2's torch 2.1), or was rewritten for nothing (torch 2.9)."""
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "p"\ndependencies = ["torch>={floor}"]\n')
    (tmp_path / "train.py").write_text(
        "import torch\nfrom torch.backends import cudnn\n\n\ndef setup(seed):\n    torch.manual_seed(seed)\n"
        "    if torch.cuda.is_available():\n        torch.cuda.manual_seed(seed)\n"
        "    if torch.cuda.is_available():\n        cudnn.deterministic = False\n"
        "        cudnn.benchmark = True\n"
    )
    found = json.loads(run_cli("scan", ".", "--format", "json", "--exit-zero").stdout)["findings"]
    guards = [f for f in found if f["code"] == "NM106"]
    assert [f["line"] for f in guards] == [7, 9]
    assert all(
        f["fix"] is None and "it only guards code that needs no change" in f["message"] for f in guards
    )


def test_an_or_with_an_alternative_that_says_nothing_of_cuda_is_not_a_cuda_test():
    """pytorch-tabular's OOM handler: `if (is_oom_runtime_error or is_cuda_oom_error) and self.handle_oom:`
    runs on any device's out of memory; its `torch.cuda.empty_cache()` was a note, "it only runs when a CUDA
    test holds" (review 49)."""
    source = (
        "import torch\n\n\nclass Guard:\n    def __exit__(self, exc_type, exc_value, tb):\n"
        "        is_oom_runtime_error = exc_type is RuntimeError and 'out of memory' in str(exc_value)\n"
        "        is_cuda_oom_error = exc_type is torch.cuda.OutOfMemoryError\n"
        "        if (is_oom_runtime_error or is_cuda_oom_error) and self.handle_oom:\n"
        "            torch.cuda.empty_cache()\n            return True\n        return False\n"
    )
    [release] = [f for f in findings(source) if f.code == "NM402"]
    assert release.fix is not None and "only runs when a CUDA test holds" not in release.message
