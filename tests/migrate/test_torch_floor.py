"""The oldest torch a project declares (`torch_floor.py`) decides which APIs `fix` may write, as ruff's
`target-version` follows `requires-python`; an explicit `target-torch` wins."""

from __future__ import annotations

import json

import pytest

from neuron_migrate.migrate.torch_floor import code_gates, lower_bound, python_cap, torch_floor, upper_bound

from .helpers import findings


@pytest.mark.parametrize(
    ("requirement", "floor"),
    [
        ("torch>=2.1", (2, 1)),
        ("torch >= 2.1.2, <3", (2, 1)),
        ("torch~=2.4.0", (2, 4)),
        ("torch==2.5.1+cu121", (2, 5)),
        ("torch==2.*", (2, 0)),
        ("torch>2.3", (2, 3)),
        ("torch^2.6", (2, 6)),  # poetry's caret, as the pyproject reader spells it
        ("torch (>=1.13)", (1, 13)),
        ("torch[opt-einsum]>=2.2; python_version >= '3.10'", (2, 2)),
        ("Torch>=2.3", (2, 3)),
        ("torch", None),
        ("torch<2.5", None),
        ("torch!=2.4.0", None),
        ("torch @ https://download.pytorch.org/whl/torch-2.5.0.whl", None),
    ],
)
def test_lower_bound_reads_each_specifier_form(requirement, floor):
    assert lower_bound(requirement) == floor


NEW, OLD = "python_version>='3.12'", "python_version<'3.12'"


def _project(dependencies: str) -> str:
    return f'[project]\nname = "p"\ndependencies = [{dependencies}]\n'


def _floor(tmp_path, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pkg").mkdir(exist_ok=True)
    found = torch_floor(tmp_path / "pkg")
    return found and (found.version, found.source)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {"pyproject.toml": _project('"torchvision>=0.20", "torch>=2.0.0"')},
            ((2, 0), "`torch>=2.0.0` in pyproject.toml"),
        ),
        (  # the lowest of the per-Python-version requirements
            {"pyproject.toml": _project(f'"torch>=2.4; {NEW}", "torch>=2.1; {OLD}"')},
            ((2, 1), "`torch>=2.1; python_version<'3.12'` in pyproject.toml"),
        ),
        (
            {"pyproject.toml": "[project.optional-dependencies]\ngpu = ['torch~=2.3']"},
            ((2, 3), "`torch~=2.3` in pyproject.toml"),
        ),
        (
            {"pyproject.toml": '[tool.poetry.dependencies]\npython = "^3.10"\ntorch = {version = "^2.2"}\n'},
            ((2, 2), "`torch^2.2` in pyproject.toml"),
        ),
        (
            {"setup.cfg": "[options]\ninstall_requires =\n    numpy\n    torch>=1.13,<3\n"},
            ((1, 13), "`torch>=1.13,<3` in setup.cfg"),
        ),
        (
            {"setup.py": 'setup(install_requires=["torch >= 2.2", "torch-neuronx"])'},
            ((2, 2), "`torch >= 2.2` in setup.py"),
        ),
        (  # packaging metadata first: requirements.txt is often a development pin
            {"setup.py": "setup(install_requires=['torch>=2.0'])\n", "requirements.txt": "torch==2.13.0\n"},
            ((2, 0), "`torch>=2.0` in setup.py"),
        ),
        (
            {"setup.py": "setup(name='p')\n", "requirements.txt": "-r base.txt\ntorch==2.5.1  # CI pin\n"},
            ((2, 5), "`torch==2.5.1` in requirements.txt"),
        ),
        ({"pyproject.toml": _project('"torch"')}, None),
        (
            {"pyproject.toml": _project('"torch-neuronx>=2.13", "torchaudio"')},
            None,
        ),
        ({"pyproject.toml": "[project\nbroken"}, None),
        ({}, None),
    ],
)
def test_the_project_declaration_is_read_from_its_packaging_files(tmp_path, files, expected):
    assert _floor(tmp_path, files) == expected


def test_the_nearest_project_decides_and_the_search_stops_there(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "outer"\ndependencies = ["torch>=2.1"]\n')
    inner = tmp_path / "sub"
    inner.mkdir()
    (inner / "setup.py").write_text("setup(name='inner')\n")  # a project of its own, declaring no torch
    assert torch_floor(inner) is None
    assert torch_floor(tmp_path).version == (2, 1)


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ("Requires-Dist: numpy\nRequires-Dist: torch>=2.0.0\n", (2, 0)),
        # transformers declares torch only in extras; a required entry wins over them
        ('Requires-Dist: torch>=2.6; extra == "torch"\nRequires-Dist: torch>=2.6; extra == "dev"\n', (2, 6)),
        ('Requires-Dist: torch>=1.13\nRequires-Dist: torch>=2.4; extra == "fast"\n', (1, 13)),
        ("Requires-Dist: torchvision>=0.20\n", None),
    ],
)
def test_an_installed_package_declares_its_torch_in_its_dist_info(tmp_path, metadata, expected):
    """A package in site-packages (or a copy of one with its `.dist-info`) has no pyproject.toml: its
    METADATA is the declaration, as accelerate's `torch>=2.0.0`."""
    package = tmp_path / "site-packages" / "somepkg" / "utils"
    package.mkdir(parents=True)
    info = tmp_path / "site-packages" / "somepkg-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.4\nName: somepkg\n{metadata}")
    floor = torch_floor(package)
    assert (floor.version if floor else None) == expected
    if floor:
        assert "somepkg-1.2.3.dist-info/METADATA" in floor.source


_RECORD = (
    "mace/__init__.py,sha256=x,1\nmace/calculators/__init__.py,,\nmace_torch-0.3.16.dist-info/RECORD,,\n"
)


@pytest.mark.parametrize(
    ("top_level", "record", "expected"),
    [("mace\nscripts\n", None, (1, 12)), (None, _RECORD, (1, 12)), (None, None, None)],
)
def test_an_installed_package_is_found_by_the_import_names_its_dist_info_lists(
    tmp_path, top_level, record, expected
):
    """`pip install mace-torch` installs `mace` beside `mace_torch-0.3.16.dist-info`, whose `top_level.txt`
    names it: without that, the package's `torch>=1.12` went unread and fixes for torch 2.9 were written into
    it (review 37). A wheel built without a `top_level.txt` (pytorch-ignite installs `ignite`, review 39)
    still lists the package's files in its `RECORD`. With neither, the names differ and nothing is
    declared."""
    package = tmp_path / "site-packages" / "mace" / "calculators"
    package.mkdir(parents=True)
    info = tmp_path / "site-packages" / "mace_torch-0.3.16.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.4\nName: mace-torch\nRequires-Dist: torch>=1.12\n")
    if top_level is not None:
        (info / "top_level.txt").write_text(top_level)
    if record is not None:
        (info / "RECORD").write_text(record)
    floor = torch_floor(package)
    assert (floor.version if floor else None) == expected
    if floor:
        assert "mace_torch-0.3.16.dist-info/METADATA" in floor.source


def test_an_installed_package_that_names_no_torch_needs_what_its_requirements_declare(tmp_path):
    """trl names no torch in its METADATA, but requires accelerate (`torch>=2.0.0`) and transformers
    (`torch>=2.6` for its torch extra): its users run torch 2.6 or newer, the highest of those floors.
    Extras it only offers do not count."""
    site = tmp_path / "site-packages"
    package = site / "trl" / "trainer"
    package.mkdir(parents=True)
    for name, metadata in (
        (
            "trl-1.0.dist-info",
            "Requires-Dist: Accelerate>=1.4\nRequires-Dist: transformers>=4.56\n"
            'Requires-Dist: fancy; extra == "fancy"\n',
        ),
        ("accelerate-1.15.0.dist-info", "Requires-Dist: torch>=2.0.0\n"),
        ("transformers-5.0.dist-info", 'Requires-Dist: torch>=2.6; extra == "torch"\n'),
        ("fancy-1.0.dist-info", "Requires-Dist: torch>=2.12\n"),
    ):
        (site / name).mkdir()
        (site / name / "METADATA").write_text(f"Metadata-Version: 2.4\n{metadata}")
    floor = torch_floor(package)
    assert floor.version == (2, 6)
    assert floor.source == (
        '`torch>=2.6; extra == "torch"` in transformers-5.0.dist-info/METADATA, which trl requires'
    )
    # without its requirements installed beside it, it declares nothing: the default target applies
    lone = tmp_path / "elsewhere"
    (lone / "trl").mkdir(parents=True)
    (lone / "trl-1.0.dist-info").mkdir()
    (lone / "trl-1.0.dist-info" / "METADATA").write_text("Requires-Dist: accelerate>=1.4\n")
    assert torch_floor(lone / "trl") is None


@pytest.mark.parametrize(
    ("source", "gates"),
    [
        ('if version.parse(torch.__version__) < version.parse("2.2") and ok:\n', [((2, 2), 1)]),
        ('import torch\nif is_torch_version(">=", "2.3"):\n    pass\n', [((2, 3), 2)]),
        ("if torch_version >= (2, 1):\n", [((2, 1), 1)]),
        (
            "if TORCH_VERSION_AT_LEAST_2_4:\n    pass\nelif TORCH_VERSION_AT_LEAST_2_6:\n",
            [((2, 4), 1), ((2, 6), 3)],
        ),
        ('if is_torch_greater_or_equal("2.6") or torch.__version__ >= "2.5":\n', [((2, 5), 1)]),
        # a requirement its message states (ART's assert)
        ('    assert ok, "AdversarialPatchPyTorch requires torch>=1.7.0"\n', [((1, 7), 1)]),
        # a torch-version module's helper (pytorch-pfn-extras), not another package's
        ('if pytorch_pfn_extras._torch_version.requires("2.3.0"):\n', [((2, 3), 1)]),
        ('if ppe.requires("1.13", "onnx"):\n', []),
        # not a test of torch's version against a release
        ('if torch.version.cuda >= "11.0":\n', []),
        ("if sys.version_info >= (3, 8) and torch:\n", []),
        ('print(torch.__version__, "1.2 GB")\n', []),
        ('# torch.__version__ < "1.5"\n', []),
        ('if np.__version__ < "1.5":\n', []),
    ],
)
def test_a_test_of_torchs_version_in_the_code_is_read(source, gates):
    assert [(gate.release, gate.line) for gate in code_gates(source.encode())] == gates


@pytest.mark.parametrize(
    ("source", "floor", "says"),
    [
        (
            'if version.parse(torch.__version__) < version.parse("2.0"):\n',
            (1, 13),
            "tests torch's version against 2.0",
        ),
        # galore-torch's hard requirement is its floor, not the release before it (review 44)
        (
            'require_version("torch>=1.5.0", "To fix: pip install torch>=1.5.0")\n',
            (1, 5),
            "requires torch 1.5",
        ),
    ],
)
def test_a_version_test_runs_below_its_release_and_a_stated_requirement_is_the_floor(source, floor, says):
    [gate] = code_gates(source.encode())
    assert gate.floor == floor and says in gate.says("f.py:1")


def test_code_that_still_runs_on_an_older_torch_sets_the_floor_when_the_metadata_does_not(run_cli, tmp_path):
    """gsplat declares bare `torch` and disables precompiled headers `if version.parse(torch.__version__) <
    version.parse("2.2")` (review 41): it runs on torch 2.1, which has no `torch.accelerator`. A bounded
    requirement in the metadata, or `target-torch`, wins over the code."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch"]\n')
    (tmp_path / "a.py").write_text(SYNC)
    (tmp_path / "backend.py").write_text(
        "import torch\nfrom packaging import version\n\n"
        'OLD = version.parse(torch.__version__) < version.parse("2.2")\n'
    )
    message = next(f["message"] for f in _findings(run_cli) if f["path"] == "a.py")
    assert "the project supports torch 2.1 (its code tests torch's version against 2.2 at backend.py:4)" in (
        message
    )
    # the median of the project's tests decides: one vendored module's stale test among newer ones does not
    for name in ("b.py", "c.py"):
        (tmp_path / name).write_text('import torch\nNEW = torch.__version__ >= "2.12"\n')
    assert "the fix needs torch" not in next(f["message"] for f in _findings(run_cli) if f["path"] == "a.py")
    (tmp_path / "b.py").unlink()
    (tmp_path / "c.py").unlink()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch>=2.13"]\n')
    assert "the fix needs torch" not in next(f["message"] for f in _findings(run_cli) if f["path"] == "a.py")


def _findings(run_cli) -> list[dict]:
    return json.loads(run_cli("scan", ".", "--format", "json", "--exit-zero").stdout)["findings"]


MEMORY = "import torch\nfree, total = torch.cuda.mem_get_info()\n"
SYNC = "import torch\ntorch.cuda.synchronize()\n"


def test_fix_holds_back_fixes_the_declared_torch_lacks_and_says_so(run_cli, tmp_path):
    (tmp_path / "a.py").write_text(SYNC)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch>=2.4"]\n')
    proc = run_cli("fix", "a.py", "--write")
    assert (tmp_path / "a.py").read_text() == SYNC, proc.stderr
    assert (
        "the fix needs torch >= 2.6, and the project supports torch 2.4 (`torch>=2.4` in pyproject.toml)"
        in (proc.stderr)
    )
    assert "1 fix held back: the project supports an older torch than they need" in proc.stderr
    assert 'target-torch = "2.13"`, to write them.' in proc.stderr
    # raising the minimum writes it (the cache knows the declaration changed)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch>=2.13"]\n')
    proc = run_cli("fix", "a.py", "--write")
    assert (tmp_path / "a.py").read_text() == (
        "import torch\nif torch.accelerator.is_available():\n    torch.accelerator.synchronize()\n"
    ), proc.stderr
    assert "held back" not in proc.stderr


def test_code_that_only_runs_on_cuda_needs_no_change_whatever_torch_is_declared(run_cli, tmp_path):
    """Behind a CUDA check that stays, the code is right as it is: a note, not a fix held back for a newer
    torch (accelerate's installed copy counted 57 held back where 23 were)."""
    source = (
        "import torch\nif torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9:\n"
        "    torch.cuda.synchronize()\n"
    )
    (tmp_path / "a.py").write_text(source)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch>=2.4"]\n')
    proc = run_cli("scan", "a.py", "--format", "json", "--exit-zero")
    sync = next(f for f in json.loads(proc.stdout)["findings"] if f["code"] == "NM401")
    assert sync["severity"] == "info" and "no change needed" in sync["message"], sync
    assert "held back" not in run_cli("fix", "a.py").stderr


def test_a_declared_newer_torch_allows_newer_apis_and_target_torch_wins(run_cli, tmp_path):
    (tmp_path / "a.py").write_text(MEMORY)
    project = '[project]\nname = "p"\ndependencies = ["torch>=2.13"]\n'
    (tmp_path / "pyproject.toml").write_text(project + '[tool.neuron-migrate]\ntarget-torch = "2.9"\n')
    proc = run_cli("fix", "a.py", "--write", "--no-cache")
    assert (tmp_path / "a.py").read_text() == MEMORY and "raise `target-torch` to apply it" in proc.stderr
    (tmp_path / "pyproject.toml").write_text(project)
    run_cli("fix", "a.py", "--write", "--no-cache")
    assert (tmp_path / "a.py").read_text() == MEMORY.replace(
        "cuda.mem_get_info", "accelerator.get_memory_info"
    )


def test_a_check_held_back_with_the_choice_it_makes_says_why_not_that_it_guards_it():
    """Under torch 1.8 both halves of `torch.device("cuda") if torch.cuda.is_available() else ...` wait for
    the same minimum; the check "guards CUDA-only code such as `torch.device("cuda")`" named a fix that only
    waits (lm-eval, review 43). Above the check's minimum but below the choice's, the check stays CUDA's."""
    source = (
        "import torch\n\n\ndef pick():\n    return (\n        torch.device('cuda')\n"
        "        if torch.cuda.is_available()\n        else torch.device('cpu')\n    )\n"
    )
    for found in findings(source, target_torch=(1, 8)):
        assert found.fix is None and "the fix needs torch >=" in found.message
        assert "guards CUDA-only code" not in found.message
    check = next(f for f in findings(source, target_torch=(2, 6)) if f.code == "NM106")
    assert check.fix is None and "guards CUDA-only code such as `torch.device('cuda')`" in check.message


def test_code_that_stays_cudas_at_any_torch_is_not_said_to_wait_for_a_newer_one():
    """The CUDA branch of a per-device chain keeps its `"cuda"` whatever torch the project declares: under
    torch 2.0 its value was "held back: raise the minimum", beside the check's "keep it" (mergekit,
    review 43)."""
    source = (
        "import torch\n\n\ndef auto(value):\n    if torch.cuda.is_available():\n"
        "        value['device'] = 'cuda'\n    elif torch.xpu.is_available():\n"
        "        value['device'] = 'xpu'\n    return value\n"
    )
    check, choice = sorted(findings(source, ("NM101", "NM106"), target_torch=(2, 0)), key=lambda f: f.line)
    assert "one branch of a per-device chain" in check.message
    assert choice.fix is None and "behind a CUDA check that stays: no change needed" in choice.message
    assert "the fix needs torch" not in choice.message


def test_fix_says_when_it_writes_for_the_default_torch(run_cli, tmp_path):
    """A project that says nothing of its torch gets fixes for the default target, and is told so (review 44:
    dadaptation and prodigyopt name no torch; the log never said which torch the fixes need)."""
    (tmp_path / "a.py").write_text(SYNC)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch"]\n')
    said = "the fixes are written for torch 2.9, the default"
    told = run_cli("fix", "a.py").stderr
    assert said in told
    # and what they need (review 49: outetts' log never said that its fixes need torch 2.7)
    assert "the default, and they need torch >= 2.6 (`torch.accelerator." in told, told
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch>=2.10"]\n')
    assert said not in run_cli("fix", "a.py").stderr


def test_a_fix_held_back_only_for_the_device_idiom_says_so():
    """`torch.amp.custom_fwd` is torch 2.4; naming the device with `current_accelerator(check_available=True)`
    is what needs 2.7 (llamafactory, review 44, whose floor is 2.4)."""
    source = (
        "import torch\n\n\n@torch.cuda.amp.custom_fwd\ndef f(x):\n    return x\n\n\n"
        "torch.cuda.synchronize()\n"
    )
    amp, sync = findings(source, ("NM203", "NM401"), target_torch=(2, 4))
    assert (
        "needs torch >= 2.7 (to name the device: `current_accelerator(check_available=True)`)" in amp.message
    )
    assert "needs torch >= 2.6;" in sync.message


@pytest.mark.parametrize(
    ("name", "text", "cap"),
    [
        ("pyproject.toml", '[project]\nname = "p"\nrequires-python = ">=3.8"\n', (2, 4)),
        ("pyproject.toml", '[tool.poetry.dependencies]\npython = "^3.9"\n', (2, 8)),
        ("setup.cfg", "[options]\npython_requires = >=3.7\n", (1, 13)),
        # torch 1.11 dropped Python 3.6, torch 1.6 Python 3.5 (review 50: ">=3.6" was capped at 1.13)
        ("pyproject.toml", '[project]\nname = "p"\nrequires-python = ">=3.6"\n', (1, 10)),
        ("pyproject.toml", '[project]\nname = "p"\nrequires-python = ">=3.5"\n', (1, 5)),
        ("pyproject.toml", '[project]\nname = "p"\nrequires-python = ">=3.4"\n', (1, 5)),  # older yet
        ("setup.py", 'setup(name="p", python_requires=">3.8, <4")\n', (2, 8)),
        ("pyproject.toml", '[project]\nname = "p"\nrequires-python = ">=3.10"\n', None),
        # no requirement: the oldest Python its classifiers list (facexlib, review 47)
        (
            "setup.py",
            "setup(classifiers=['Programming Language :: Python :: 3.8',\n"
            "                   'Programming Language :: Python :: 3.7'])\n",
            (1, 13),
        ),
        ("pyproject.toml", '[project]\nclassifiers = ["Programming Language :: Python :: 3.10"]\n', None),
        ("pyproject.toml", '[project]\nname = "p"\n', None),
    ],
)
def test_an_old_python_caps_the_torch_a_project_runs_on(tmp_path, name, text, cap):
    """A project for Python 3.8 has users on torch 2.4 at most (torch 2.5 has no Python 3.8 wheels), for 3.9
    on torch 2.8 at most (torch 2.9 needs 3.10): stable-ts declares no torch bound and `>=3.8` (review 45)."""
    (tmp_path / name).write_text(text)
    found = python_cap(tmp_path)
    assert (found.version if found else None) == cap


def test_an_installed_packages_python_caps_its_torch_unless_it_bounds_torch(run_cli, tmp_path):
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "a.py").write_text(SYNC)
    info = site / "pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Name: pkg\nRequires-Python: >=3.8\nRequires-Dist: torch\n")
    assert "the project supports torch 2.4 (its Python is `>=3.8`" in run_cli("fix", "site").stderr
    (info / "METADATA").write_text("Name: pkg\nRequires-Python: >=3.8\nRequires-Dist: torch>=2.6\n")
    assert "held back" not in run_cli("fix", "site").stderr


@pytest.mark.parametrize(
    ("requirement", "newest"),
    [
        ("torch<2.7", (2, 6)),
        ("torch (<2.7,>=2.3.1)", (2, 6)),
        ("torch<2.7.1", (2, 7)),
        ("torch==2.1.1", (2, 1)),
        ("torch~=2.1.0", (2, 1)),
        ("torch<2", (1, 13)),
        ("torch>=2.1,<=2.13.0", (2, 13)),
        ("torch>=2.0", None),
        ("torch<3", None),
        ("torch~=2.1", None),
    ],
)
def test_the_newest_torch_a_requirement_allows(requirement, newest):
    assert upper_bound(requirement) == newest


def test_a_torch_requirement_below_torchneuron_s_is_said(run_cli, tmp_path):
    """chai_lab's `torch<2.7`, rtdl's `torch<2` (review 50): TorchNeuron needs torch 2.13, so that bound is
    where the move starts; the logs never said so."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch>=2.3,<2.7"]\n')
    (tmp_path / "a.py").write_text(SYNC)
    said = "TorchNeuron needs torch 2.13, which the project's torch requirement excludes: `torch>=2.3,<2.7`"
    assert said in run_cli("scan", ".").stderr
    assert said in run_cli("fix", ".").stderr
    found = json.loads(run_cli("scan", ".", "--format", "json").stdout)
    assert found["torch_caps"] == ["`torch>=2.3,<2.7` in pyproject.toml (torch 2.6 at most)"]
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch>=2.3,<3"]\n')
    assert "TorchNeuron needs torch 2.13, which" not in run_cli("scan", ".", "--no-cache").stderr
