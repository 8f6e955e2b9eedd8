"""The patch reads like the project's own code: its line length, its formatter's wrapping, its import groups;
and a project that passes ruff (lint and format) before `fix` passes it after."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_migrate.migrate.cautions import MEMORY_ON_MPS_FROM
from neuron_migrate.migrate.layout import Layout, layout_for, reflow, wrap

from .helpers import findings, fixed, fixed_until_stable

RUFF = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")

LONG_LINES = [
    '    device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")',
    'device_type = (torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")).type',
    "    peak = torch.accelerator.max_memory_allocated() if torch.accelerator.is_available() else 0",
    (
        "        scaler = torch.amp.GradScaler(device_type, enabled=args.amp and "
        "torch.accelerator.is_available())"
    ),
    (
        "        with torch.amp.autocast(device_type, dtype=torch.float16, enabled=args.amp and "
        "torch.accelerator.is_available()):"
    ),
    (
        "    x = torch.nn.Linear(2, 2).to(torch.accelerator.current_accelerator(check_available=True) or "
        'torch.device("cpu"))'
    ),
    (
        "    dist.init_process_group(backend=dist.get_default_backend_for_device("
        'torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")))'
    ),
    (
        "    loader = DataLoader(dataset, batch_size=args.batch_size, pin_memory=True, sampler=sampler, "
        "shuffle=False)  # c"
    ),
    '        if torch.device(device_map).type != "cpu" and torch.device(device_map).index is None:',
    (
        "    return torch.empty(*tuple(obj.size()), dtype=obj.dtype) if torch.accelerator.is_available() "
        "else torch.zeros(3)"
    ),
]


def _ruff_format(text: str, line_length: int) -> str:
    done = subprocess.run(
        [RUFF, "format", f"--line-length={line_length}", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@pytest.mark.parametrize("line", LONG_LINES)
def test_our_wrapping_matches_ruff_format(line):
    """Without a formatter installed the fix wraps lines itself; it must wrap them as the formatter would."""
    depth = (len(line) - len(line.lstrip())) // 4
    header = ["def f():", "    if True:"][:depth]
    body = ["    " * (depth + 1) + "pass"] if line.endswith(":") else []
    source = "\n".join([*header, line, *body]) + "\n"
    ours = "\n".join([*header, *wrap(line, 88), *body]) + "\n"
    assert ours == _ruff_format(source, 88)


def test_line_length_comes_from_the_nearest_config(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.black]\nline-length = 100\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "setup.cfg").write_text("[flake8]\nmax-line-length = 79\n")
    layout_for.cache_clear()
    assert layout_for(tmp_path) == Layout(100, "black", tmp_path / "pyproject.toml")
    assert layout_for(tmp_path / "sub").line_length == 79
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "ruff.toml").write_text("line-length = 120\n")
    assert layout_for(tmp_path / "other") == Layout(120, "ruff", tmp_path / "other" / "ruff.toml")
    (tmp_path / "flake8").mkdir()  # flake8 takes either spelling (MONAI's setup.cfg)
    (tmp_path / "flake8" / "setup.cfg").write_text("[flake8]\nmax_line_length = 120\n")
    assert layout_for(tmp_path / "flake8").line_length == 120


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # third-party group, sorted: `import torch` among the plain imports, before `from` imports
        (
            "import os\n\nimport numpy as np\nfrom tqdm import tqdm\n\nx = y.cuda()\n",
            "import os\n\nimport numpy as np\nimport torch\nfrom tqdm import tqdm\n\n",
        ),
        # no third-party group yet: a new one after the standard library, before the project's own
        (
            "import os\nimport sys\n\nfrom . import util\n\nx = y.cuda()\n",
            "import os\nimport sys\n\nimport torch\n\nfrom . import util\n\n",
        ),
        # docstring and __future__ first, always
        (
            '"""Doc."""\nfrom __future__ import annotations\n\nx = y.cuda()\n',
            '"""Doc."""\nfrom __future__ import annotations\nimport torch\n\n',
        ),
    ],
)
def test_new_import_goes_into_its_group(before, after):
    text = fixed(before, ("NM103",))
    assert text.startswith(after), text


def test_a_module_that_imports_torch_under_an_alias_gets_no_second_import():
    """stable-baselines3 writes `import torch as th` everywhere: the fix names torch `th` (in f-string fields
    too) instead of adding `import torch` beside it; strings and attributes called `torch` stay."""
    source = (
        "import numpy as np\nimport torch as th\n\n\ndef setup(model, rank):\n"
        '    th.cuda.set_device(rank)\n    name = "torch.cuda"\n'
        '    th.distributed.init_process_group("cuda:nccl,cpu:gloo")\n    return model.cuda()\n'
    )
    text = fixed_until_stable(source)
    assert "import torch\n" not in text and "th.accelerator." in text, text
    assert 'name = "torch.cuda"' in text
    assert ":{th.distributed.get_default_backend_for_device(" in text, text
    assert "torch." not in text.replace('"torch.cuda"', ""), text
    compile(text, "example.py", "exec")


def test_a_function_that_imports_torch_itself_gets_no_module_import():
    """espnet's batch synchronisation imports torch in a `try` with an `ImportError` fallback, so the module
    works without torch: a module-level `import torch` would defeat that, and shadow the local one."""
    source = (
        "def sync(batches):\n    try:\n        import torch\n    except ImportError:\n"
        "        return batches\n    if not torch.cuda.is_available():\n        return batches\n"
        "    return torch.ones(1).cuda()\n"
    )
    after = fixed(source)
    assert after.startswith("def sync(batches):\n") and after.count("import torch") == 1
    assert "torch.accelerator.is_available()" in after


def test_repeats_a_fix_creates_are_dropped():
    """A rewrite that makes a copy of the statement right above it drops the copy, and the comment under it
    that pointed up at it (`# ^^`: under the statement above, it would describe the wrong line)."""
    source = (
        "import torch\nif torch.accelerator.is_available():\n    torch.accelerator.synchronize()\n"
        "    torch.cuda.synchronize()\n    # ^^ waits for the kernels\n    x = 1\n"
    )
    assert fixed(source, ("NM401",)) == (
        "import torch\nif torch.accelerator.is_available():\n    torch.accelerator.synchronize()\n    x = 1\n"
    )
    kept = "import torch\ntorch.manual_seed(1)\n# ^^ the CPU generator\nx = torch.ones(2)\n"
    assert fixed(kept, ("NM404",)) == kept


def test_a_cuda_seed_right_after_the_same_torch_seed_is_a_note():
    """composer and nanotron seed CUDA again after `torch.manual_seed` (with a comment, or in an `if
    torch.cuda.is_available():`): it does nothing off CUDA and `torch.manual_seed` already seeds every
    device, so the code works everywhere as it is. Deleting it would be a clean-up, not a migration, and
    reviewers read it as noise; the check around it is a note too."""
    commented = (
        "import torch\ndef seed(s):\n    torch.manual_seed(s)\n"
        "    # torch.manual_seed may call manual_seed_all but calling it again here\n"
        "    torch.cuda.manual_seed_all(s)\n"
    )
    guarded = (
        "import torch, numpy as np\ntorch.manual_seed(s)\nnp.random.seed(s)\n# and CUDA's generators too\n"
        "if torch.cuda.is_available():\n    torch.cuda.manual_seed_all(s)\nprint('ok')\n"
    )
    for source in (commented, guarded):
        assert fixed(source) == source
        assert all(f.fix is None for f in findings(source)), source
    [seed] = findings(commented, ("NM404",))
    assert "already seeds every device" in seed.message and "no change needed" in seed.message
    check = next(f for f in findings(guarded) if f.code == "NM106")
    assert "it only guards code that needs no change" in check.message


def test_a_guard_that_is_all_of_an_else_becomes_an_elif():
    source = (
        "import torch\ndef empty_cache():\n    if is_torch_xpu_available():\n"
        "        torch.xpu.empty_cache()\n    else:  # CUDA, or nothing\n"
        "        # frees the cached blocks\n        torch.cuda.empty_cache()\n"
        "    return None\n"
    )
    assert fixed(source, ("NM402",), target_torch=MEMORY_ON_MPS_FROM) == (
        "import torch\ndef empty_cache():\n    if is_torch_xpu_available():\n"
        "        torch.xpu.empty_cache()\n    elif torch.accelerator.is_available():  # CUDA, or nothing\n"
        "        # frees the cached blocks\n"
        "        torch.accelerator.empty_cache()\n    return None\n"
    )


def test_a_comment_that_said_the_unguarded_call_was_safe_goes_with_it():
    source = (
        "import torch\ndef seed(s):\n    if is_xpu_available():\n        torch.xpu.manual_seed_all(s)\n"
        "    else:\n        torch.cuda.manual_seed_all(s)\n"
        "    # ^^ safe to call this function even if cuda is not available\n    random.seed(s)\n"
    )
    assert fixed(source, ("NM404",)) == (
        "import torch\ndef seed(s):\n    if is_xpu_available():\n        torch.xpu.manual_seed_all(s)\n"
        "    elif torch.accelerator.is_available():\n        torch.get_device_module().manual_seed_all(s)\n"
        "    random.seed(s)\n"
    )


@pytest.mark.parametrize(
    "source",
    [
        # the `else` of a loop or a `try`, or one that holds more than the guarded call
        "import torch\nfor x in xs:\n    pass\nelse:\n    torch.cuda.empty_cache()\n",
        "import torch\ntry:\n    pass\nexcept OSError:\n    pass\nelse:\n    torch.cuda.empty_cache()\n",
        "import torch\nif a:\n    pass\nelse:\n    torch.cuda.empty_cache()\n    print('freed')\n",
    ],
)
def test_other_else_blocks_keep_the_nested_guard(source):
    assert "else:\n    if torch.accelerator.is_available():" in fixed(
        source, ("NM402",), target_torch=MEMORY_ON_MPS_FROM
    )


PROJECT = '''\
"""A small training script that passes ruff (lint, imports, format) as it is."""

import argparse
import os

import torch
from torch.utils.data import DataLoader


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args([])
    model = torch.nn.Linear(4, 4).cuda()
    batch = torch.ones(2, 4).cuda(non_blocking=True)
    with torch.cuda.amp.autocast(enabled=True):
        out = model(batch)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    loader = DataLoader([1, 2], pin_memory=True)
    print(args.device, out.shape, peak, len(loader), os.getpid())


if __name__ == "__main__":
    main()
'''


def test_a_project_that_passes_ruff_before_fix_passes_it_after(tmp_path, run_cli):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.ruff]\nline-length = 88\n[tool.ruff.lint]\nselect = ["E", "F", "I", "W"]\n'
    )
    script = tmp_path / "train.py"
    script.write_text(PROJECT)
    check = [RUFF, "check", "--no-cache", str(tmp_path)]
    form = [RUFF, "format", "--check", "--no-cache", str(tmp_path)]
    assert subprocess.run(check, capture_output=True, cwd=tmp_path).returncode == 0
    assert subprocess.run(form, capture_output=True, cwd=tmp_path).returncode == 0
    done = run_cli("fix", str(tmp_path), "--write", "--no-cache", cwd=tmp_path)
    assert script.read_text() != PROJECT, done.stderr
    lint = subprocess.run(check, capture_output=True, text=True, cwd=tmp_path)
    assert lint.returncode == 0, lint.stdout + script.read_text()
    formatted = subprocess.run(form, capture_output=True, text=True, cwd=tmp_path)
    assert formatted.returncode == 0, formatted.stdout + script.read_text()


def test_a_bracket_the_fix_shortens_is_joined_where_the_formatter_ran(tmp_path):
    """ultralytics' ReID model: a call split over three lines fits on one once `torch.cuda.` is gone, and
    `ruff format --check` fails until it is joined. In a file the formatter did not lay out, the fix does
    not reformat: it changes only what it rewrote."""
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 88\n")
    path = tmp_path / "timing.py"
    before = (
        "import torch\n\n\ndef make():\n"
        "    start_event_for_timing_the_forward_pass_of_model = torch.cuda.Event(\n"
        "        enable_timing=True\n    )\n    return start_event_for_timing_the_forward_pass_of_model\n"
    )
    after = before.replace("torch.cuda.Event(", "torch.Event(")
    layout = layout_for(tmp_path)
    joined = reflow(before, after, layout, path)
    one_line = "    start_event_for_timing_the_forward_pass_of_model = torch.Event(enable_timing=True)\n"
    assert one_line in joined
    assert _ruff_format(joined, 88) == joined
    unformatted = before.replace("import torch\n", "import torch\nx = [1,2]\n")
    assert reflow(unformatted, unformatted.replace("torch.cuda.Event(", "torch.Event("), layout, path) == (
        unformatted.replace("torch.cuda.Event(", "torch.Event(")
    )


def test_a_long_line_inside_brackets_is_not_split_as_a_statement():
    """`device_type=device_type,` inside a call is no assignment: splitting it as one turned it into
    `device_type= (device_type,)` and dropped the comma (torch's op_db, where ruff's range mode had to be
    refused because it reformats the whole table)."""
    before = (
        "x = [\n    DecorateInfo(toleranceOverride({torch.float32: tol(atol=1e-4, rtol=0)}),\n"
        "                 'TestCommon', 'test_noncontiguous_samples', device_type='cuda',\n"
        "                 active_if=TEST_WITH_ROCM),\n]\n"
    )
    after = before.replace("device_type='cuda'", "device_type=device_type")
    assert reflow(before, after, Layout(line_length=79)) == after


def test_a_line_the_project_kept_long_is_not_wrapped_when_the_rewrite_keeps_its_length():
    """transformers keeps a 92-column condition (its limit is 119); rewritten to the same length it stays one
    line, where a line the rewrite makes longer is still wrapped."""
    condition = (
        "                if self.model.device.type == 'cuda' and self.model.device.index is not None:\n"
    )
    same = condition.replace("== 'cuda'", "!= 'cpu'")
    assert reflow(condition, same, Layout(line_length=88)) == same
    longer = condition.replace("'cuda'", "'cuda' and self.model.device.type != 'meta'")
    assert reflow(condition, longer, Layout(line_length=88)) != longer


def test_the_formatter_reads_the_projects_line_length_when_the_path_is_relative(tmp_path, run_cli):
    """`neuron-migrate fix plugins/precision/fsdp.py` from the project's root: the formatter runs in the
    file's folder, where the relative path named another file, so it wrapped at its default 88 instead of
    the project's 120 (Lightning's `torch.autocast` call)."""
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 120\n")
    (tmp_path / "plugins" / "precision").mkdir(parents=True)
    script = tmp_path / "plugins" / "precision" / "fsdp.py"
    script.write_text(
        "import torch\n\n\nclass FSDPPrecision:\n    def forward_context(self):\n        if self.precision:\n"
        '            return torch.autocast("cuda", dtype=(torch.bfloat16 if self.precision == "bf16-mixed" '
        "else torch.float16))\n"
    )
    done = run_cli("fix", "plugins/precision/fsdp.py", "--write", "--no-cache", cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    line = '                dtype=(torch.bfloat16 if self.precision == "bf16-mixed" else torch.float16),\n'
    assert len(line) > 88 and line in script.read_text()


def test_a_project_without_a_formatter_keeps_the_quotes_of_the_literals_a_wrap_moves(tmp_path):
    """fastai and skorch configure no formatter: ruff's range mode, which wraps a rewritten line there,
    turned the project's own `init_method='env://'` into `"env://"` in the lines it moved."""
    path = tmp_path / "distributed.py"
    before = (
        "import torch\n\n\ndef setup(gpu):\n"
        "    torch.distributed.init_process_group(backend='nccl', init_method='env://', world_size=gpu)\n"
    )
    after = before.replace(
        "backend='nccl'", "backend=torch.distributed.get_default_backend_for_device(device)"
    )
    wrapped = reflow(before, after, Layout(line_length=88), path)
    assert wrapped != after and "init_method='env://'" in wrapped
    assert all(len(line) <= 88 for line in wrapped.splitlines())


_SWITCH = (
    "import torch\nfrom contextlib import contextmanager\nfrom packaging.version import parse as V\n\n"
    "if V(torch.__version__) >= V('1.6.0'):\n    from torch.cuda.amp import autocast\nelse:\n"
    "    # Nothing to do if torch<1.6.0\n    @contextmanager\n    def autocast(enabled=True):\n"
    "        yield\n\n\n"
)


def test_a_version_switch_the_fix_leaves_unused_goes_with_its_imports():
    """espnet binds `autocast` for torch < 1.6 in about 20 modules: once every `autocast(False)` is
    `torch.amp.autocast(...)`, the switch is dead code and its import an F401, so both go, and so do the
    imports only its test used (`V`, `contextmanager`)."""
    source = _SWITCH + "def forward(x):\n    with autocast(False):\n        return x\n"
    after = fixed(source)
    assert after.startswith("import torch\n\n\ndef forward(x):\n"), after
    assert "torch.amp.autocast(" in after and "V(" not in after and "contextmanager" not in after


def test_a_version_switch_with_a_use_left_stays():
    source = (
        _SWITCH + "def forward(x):\n    with autocast(False):\n        return x\n\n\n"
        "def factory():\n    return autocast\n"
    )
    after = fixed(source)
    assert after.startswith(_SWITCH) and "torch.amp.autocast(" in after


def test_the_blank_line_under_the_docstring_stays_when_the_first_import_goes():
    """espnet's gan_tts model: the removed imports took the blank line between the module docstring and the
    imports with them (review 19)."""
    source = '"""GAN-based TTS model."""\n\n' + _SWITCH.replace("import torch\n", "", 1).replace(
        "from packaging", "import torch\nfrom packaging", 1
    )
    source += "def forward(x):\n    with autocast(False):\n        return x\n"
    after = fixed(source)
    assert after.startswith('"""GAN-based TTS model."""\n\nimport torch\n\n\ndef forward(x):\n'), after


def test_a_module_that_imports_torch_only_inside_functions_gets_no_top_level_import():
    """skrl's `__init__` imports torch inside the functions that need it (JAX users have no torch): a fix in
    a function without that import is unsafe and says why; one in a function with it stays safe."""
    source = "def lazy(x):\n    import torch\n    return x.cuda()\n\n\ndef eager(x):\n    return x.cuda()\n"
    first, second = findings(source, ("NM103",))
    assert first.fix.safety == "safe"
    assert second.fix.safety == "unsafe" and "only inside functions (`import torch`)" in second.message
    assert "\nimport torch\n" not in "\n" + fixed(source, ("NM103",))


def test_a_blank_line_above_a_wrapped_statement_keeps_its_whitespace(tmp_path):
    """outetts and StyleTTS 2 (review 49): ruff's range mode on the rewritten statement also emptied the
    whitespace-only line above it and joined the two blank lines below it, lines the fix had no reason to
    touch."""
    path = tmp_path / "interface.py"
    before = (
        "import torch\n\n\ndef load(device, path):\n    if path is None:\n        path = 'x'\n        \n"
        "    device = torch.device(device if device is not None"
        " else 'cuda' if torch.cuda.is_available() else 'cpu')\n\n\n"
        "    return device\n"
    )
    after = before.replace(
        "'cuda' if torch.cuda.is_available() else 'cpu'",
        "(torch.accelerator.current_accelerator(check_available=True) or torch.device('cpu')).type",
    )
    configured = Layout(line_length=88, config=tmp_path / "pyproject.toml")
    wrapped = reflow(before, after, configured, path)
    assert "        path = 'x'\n        \n    device = torch.device(\n" in wrapped
    assert wrapped.endswith("    )\n\n\n    return device\n")  # and the two blank lines below it
    assert all(len(line) <= 88 for line in wrapped.splitlines())


def test_a_project_without_a_line_length_keeps_new_lines_within_the_file_s_own():
    """StyleTTS 2 (review 49) and ms-swift (review 50) configure no formatter and write 120-column lines; a
    fix there wrapped at the default 88 what the project writes on one line."""
    long = (
        "    y = some_function_name(x, another_argument, yet_another_argument, and_one_more_for_good_measure)"
    )
    before = (
        "import torch\n\n\ndef f(x):\n" + (long + " + 1\n") * 3 + "    return x.to('cuda')\n"
    )  # 106 columns
    idiom = 'torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")'
    after = before.replace("x.to('cuda')", f"x.to({idiom})")  # 97 columns
    assert reflow(before, after, Layout(line_length=88)) == after
    wider = before.replace("x.to('cuda')", f"x.to({idiom}, non_blocking=True)")  # 116 columns
    assert reflow(before, wider, Layout(line_length=88)) != wider
    once = "import torch\n\n\ndef f(x):\n" + long + " + 1\n    return x.to('cuda')\n"
    assert reflow(
        once, once.replace("x.to('cuda')", f"x.to({idiom})"), Layout(line_length=88)
    ) != once.replace("x.to('cuda')", f"x.to({idiom})")


def test_a_long_string_or_comment_does_not_widen_the_line_length():
    """torchao and axolotl are formatted at 88 and still have a few longer lines, each a string or a comment
    a formatter cannot split: those do not say the project writes wider code (review 51)."""
    message = "    raise ValueError('" + "x" * 100 + "')  # " + "y" * 20 + "\n"
    before = (
        "import torch\n\n\ndef f(x):\n    if x is None:\n" + "    " + message + "    return x.to('cuda')\n"
    )
    idiom = 'torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")'
    after = before.replace("x.to('cuda')", f"x.to({idiom})")  # 97 columns
    assert reflow(before, after, Layout(line_length=88)) != after
