"""A fix that writes `torch.accelerator` into code TorchScript may compile is unsafe: scripting it fails on
every device (MONAI's `CastToFloat`, review 14)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from neuron_migrate.migrate.cautions import MEMORY_ON_MPS_FROM

from .helpers import findings

MODULE = (
    "import torch\n\n\nclass CastToFloat(torch.nn.Module):\n"
    "    def __init__(self, mod):\n        super().__init__()\n        self.mod = mod\n"
    "        self.stream = torch.cuda.Stream() if torch.cuda.is_available() else None\n\n"
    "    def forward(self, x):\n"
    '        with torch.autocast("cuda", dtype=torch.bfloat16):\n            return self.mod(x)\n'
)
SCRIPTS = "\n\ndef export(model):\n    return torch.jit.script(CastToFloat(model))\n"


def _autocast(source: str):
    return next(f for f in findings(source, ("NM204",)) if f.code == "NM204")


def test_a_module_method_in_torchscript_code_gets_an_unsafe_fix_that_says_why():
    found = _autocast(MODULE + SCRIPTS)
    assert found.fix is not None and found.fix.safety == "unsafe"
    assert "TorchScript runs neither" in found.message and "CastToFloat.forward" in found.message


def test_init_and_files_that_never_script_keep_their_safe_fixes():
    assert _autocast(MODULE).fix.safety == "safe"
    scripted = [f for f in findings(MODULE + SCRIPTS) if "TorchScript" in f.message]
    assert [f.code for f in scripted] == ["NM204"]  # not the availability check in __init__


@pytest.mark.parametrize(
    ("decorated", "scripted"),
    [
        # a decorated function scripts that function: the module's methods stay eager code
        ("@torch.jit.script\ndef snr(t):\n    return t * 2\n", None),
        ("@torch.jit.script\nclass Schedule:\n    def at(self, t: int) -> int:\n        return t\n", None),
        # scripting an instance, or a method marked for scripting, compiles the module's methods
        ("def export(m):\n    return torch.jit.script(m)\n", "CastToFloat.forward"),
        (
            "class Other(torch.nn.Module):\n    @torch.jit.export\n    def f(self):\n        pass\n",
            "CastToFloat.forward",
        ),
    ],
)
def test_only_what_a_file_scripts_holds_module_methods_back(decorated, scripted):
    found = _autocast(MODULE + "\n\n" + decorated)
    assert (found.fix.safety == "unsafe") is (scripted is not None)
    assert scripted is None or scripted in found.message


def test_a_method_of_a_class_decorated_for_torchscript_counts():
    source = (
        "import torch\n\n\n@torch.jit.script\nclass Scaler:\n    def scale(self, x: torch.Tensor):\n"
        '        with torch.autocast("cuda", dtype=torch.float16):\n            return x * 2\n'
    )
    assert "`Scaler.scale` is ever scripted" in _autocast(source).message


def test_a_function_decorated_for_torchscript_counts_too():
    source = (
        "import torch\n\n\n@torch.jit.script\ndef scaled(x: torch.Tensor) -> torch.Tensor:\n"
        '    with torch.autocast("cuda", dtype=torch.float16):\n        return x * 2\n'
    )
    assert "`scaled` is ever scripted" in _autocast(source).message


def test_an_autocast_turned_off_for_the_input_is_unsafe_there_too_and_safe_elsewhere():
    """`torch.autocast(x.device.type, enabled=False)` compiles but fails when it runs under TorchScript
    ("Autocast device argument must be a constant", review 16): in TorchScript code it is unsafe; elsewhere it
    is what the code means on every device."""
    disabled = MODULE.replace('"cuda", dtype=torch.bfloat16', '"cuda", enabled=False')
    scripted = _autocast(disabled + SCRIPTS)
    assert scripted.fix.safety == "unsafe" and scripted.fix.edits[0].text == "x.device.type"
    assert _autocast(disabled).fix.safety == "safe"


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_torchscript_cannot_compile_torch_accelerator(tmp_path):
    """The premise, checked on the installed torch: the same function scripts with the CUDA autocast and
    fails once it calls `torch.accelerator`."""
    torch = pytest.importorskip("torch")
    scripted = {}
    for name, device_type in (
        ("cuda_autocast", '"cuda"'),
        ("accelerator", "torch.accelerator.current_accelerator(check_available=True).type"),
    ):
        (tmp_path / f"{name}.py").write_text(
            "import torch\n\n\ndef f(x: torch.Tensor):\n"
            f"    with torch.autocast({device_type}, enabled=False):\n        return x * 2\n"
        )
        spec = importlib.util.spec_from_file_location(name, tmp_path / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        try:
            torch.jit.script(module.f)
            scripted[name] = True
        except Exception:  # TorchScript raises its own frontend errors
            scripted[name] = False
        finally:
            del sys.modules[name]
    assert scripted == {"cuda_autocast": True, "accelerator": False}


def test_a_project_that_guards_code_for_torchscript_makes_its_module_fixes_unsafe(run_cli, tmp_path):
    """kornia's matchers show no sign of TorchScript, but kornia scripts them (and 30 of its modules test
    `torch.jit.is_scripting()`): in such a project the autocast fix of a module method waits for review. The
    same file alone in a project that never scripts is fixed."""
    plain = MODULE.replace(
        "        self.stream = torch.cuda.Stream() if torch.cuda.is_available() else None\n", ""
    )
    (tmp_path / "norm.py").write_text(plain)
    alone = run_cli("fix", ".", "--no-cache")
    assert '-        with torch.autocast("cuda"' in alone.stdout, alone.stderr
    (tmp_path / "utils.py").write_text(
        "import torch\n\n\ndef eager():\n    return not torch.jit.is_scripting()\n"
    )
    project = run_cli("fix", ".", "--no-cache")
    assert project.stdout == "" and "TorchScript runs neither" in project.stderr, project.stderr


def test_a_method_that_calls_cuda_code_torchscript_cannot_compile_was_never_scriptable():
    """MONAI's VISTA3D empties the CUDA cache in `forward`: TorchScript compiles no
    `torch.cuda.empty_cache()`, so the guarded `torch.accelerator.empty_cache()` breaks nothing and stays
    safe."""
    source = (
        "import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n"
        "        torch.cuda.empty_cache()\n        return x\n"
        + SCRIPTS.replace("CastToFloat(model)", "Net()")
    )
    empty = next(f for f in findings(source, target_torch=MEMORY_ON_MPS_FROM) if f.code == "NM402")
    assert empty.fix is not None and empty.fix.safety == "safe"


def test_in_a_torchscript_project_an_autocast_fix_in_any_function_is_unsafe(run_cli, tmp_path):
    """kornia scripts plain functions (`match_nn`), whose autocast then needs a constant device."""
    (tmp_path / "matching.py").write_text(
        "import torch\n\n\ndef cdist(d1: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:\n"
        '    with torch.autocast(device_type="cuda", enabled=False):\n        return torch.cdist(d1, d2)\n'
    )
    assert "d1.device.type" in run_cli("fix", ".", "--no-cache").stdout
    (tmp_path / "utils.py").write_text(
        "import torch\n\n\ndef eager():\n    return not torch.jit.is_scripting()\n"
    )
    project = run_cli("fix", ".", "--no-cache")
    assert project.stdout == "" and "if `cdist` is ever scripted" in project.stderr, project.stderr
