"""The oldest torch a project says it supports, read from its packaging metadata, so `fix` never writes an API
its users' torch lacks (as ruff's `target-version` follows `requires-python`).

The project is the nearest folder at or above a source file that holds `pyproject.toml`, `setup.cfg` or
`setup.py`, or that is an installed package with its `<name>-<version>.dist-info` beside it (by that name, or
by an import name its `top_level.txt` or `RECORD` lists; a package in `site-packages`, or a copy of one: its
`METADATA`'s `Requires-Dist` lines, required ones first, then its extras'; an installed package that names no
torch needs the highest floor of the installed packages it requires: trl needs what accelerate and
transformers declare).
A source project's torch requirement is read, in this order, from the first place that names torch: `[project]
dependencies`, then `[project.optional-dependencies]` (PEP 621); `[tool.poetry.dependencies]`; `setup.cfg`'s
`install_requires` and `extras_require`; requirement strings in `setup.py`; and last the project's own
`requirements.txt` (often pinned for development rather than the range users get). The floor is the
requirement's lower bound (`>=2.1`, `~=2.1`, `==2.1.*`, `>2.1`, poetry's `^2.1`) to the minor release; when
torch is listed several times (per Python version), the lowest. A requirement without a lower bound, or no
requirement, says nothing of the metadata: then the project's code may (`code_gates`). A test of
torch's version against 2.2 (gsplat's `version.parse(torch.__version__) < version.parse("2.2")`, auto-round's
`TORCH_VERSION_AT_LEAST_2_4`) means it still runs on a torch older than that, so the floor is the release
before the one its code tests torch against; a requirement the code states
(`require_version("torch>=1.5.0")`, "requires torch>=1.7.0") is that release; the median of what its lines
imply (`median_gate`: a vendored module's stale tests do not decide, torchao's copy of SAM2 testing 2.2
twice among 64 tests that mostly test 2.10 and 2.11; review 41: gsplat declares bare `torch`). The newest
torch for the oldest Python the project declares caps that (`python_cap`: `Requires-Python: >=3.8` means
users on torch 2.4; without a requirement, the oldest Python its classifiers list). Without any of these
the default target applies (`fix` says so). An explicit `target-torch` setting wins over all of this.
"""

from __future__ import annotations

import configparser
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: the oldest torch the fixes write for when neither `target-torch` nor the project says
DEFAULT_TARGET_TORCH = (2, 9)
#: the words of a fix withdrawn because the project's declared torch is older than the fix needs
HELD_BACK = "and the project supports torch"
_PROJECT_FILES = ("pyproject.toml", "setup.cfg", "setup.py")
#: `torch`, optional extras, then a specifier list up to the end of the requirement (a marker starts at `;`)
_REQUIREMENT = re.compile(r"^\s*torch\s*(?:\[[^\]]*\])?\s*\(?\s*([^;#)]*)", re.IGNORECASE)
_CLAUSE = re.compile(r"^\s*(===|==|~=|>=|>|\^|~|<=|<|!=)?\s*v?(\d+)(?:\.(\d+|\*))?")
#: the distribution name a requirement starts with (`accelerate>=1.4` -> `accelerate`)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: a quoted requirement string for torch in setup.py (`"torch>=2.0"`, `'torch (>=2.1)'`)
_QUOTED = re.compile(r"""["'](torch\s*(?:\[[^\]'"]*\])?\s*\(?\s*(?:===|==|~=|>=|>|<=|<|!=)[^"']*)["']""")


@dataclass(frozen=True)
class TorchFloor:
    """The project's oldest supported torch (`version`, to the minor release) and where that was read
    (`source`: "`torch>=2.0` in setup.py")."""

    version: tuple[int, int]
    source: str


def torch_floor(folder: Path) -> TorchFloor | None:
    """The torch floor of the project that holds `folder`, or None when it declares none."""
    return _floor_of_project(project_of(folder))


def project_of(folder: Path) -> Path | None:
    """The folder (or an installed package's `.dist-info`) whose metadata declares `folder`'s torch."""
    return _project_folder(folder.absolute())


#: what a line that tests torch's version names: `torch.__version__` or a `torch_version` / `TORCH_VERSION`
#: name compared with a release, or a version helper or flag (`is_torch_version("<", "2.3")`,
#: `is_torch_greater_or_equal("2.6")`, `TORCH_VERSION_AT_LEAST_2_4`, `is_torch_greater_or_equal_than_2_7`,
#: a function of a torch-version module called with a release: pytorch-pfn-extras'
#: `_torch_version.requires("2.3.0")`)
_VERSION_NAMES = (b"__version__", b"torch_version", b"TORCH_VERSION", b"Torch_Version")
_HELPER = re.compile(
    rb"torch_(?:version_)?(?:at_least|greater|newer|older|less)|is_torch_version|"
    rb"""torch_version\.\w+\(\s*["']\d""",
    re.IGNORECASE,
)
#: the release a gate line names: "2.2", "2.4.0", (2, 3), _2_7, or a requirement a message states
#: (ART's `assert ..., "AdversarialPatchPyTorch requires torch>=1.7.0"`)
_GATED_RELEASE = re.compile(
    rb"""["'](\d+)\.(\d+)|\((\d+),\s*(\d+)|_(\d+)_(\d+)\b|torch\s*>=?\s*(\d+)\.(\d+)""", re.IGNORECASE
)
_REQUIREMENT_TEXT = re.compile(rb"torch\s*>=?\s*\d+\.\d+", re.IGNORECASE)
_COMPARISON = re.compile(rb"[<>]=?")


class CodeGate(NamedTuple):
    """What one line of a project's code says of the torch it runs on: the oldest torch that line implies
    (`floor`), the release it names, and whether it states a requirement ("requires torch>=1.7.0",
    `require_version("torch>=1.5.0")`: the floor is that release) or tests the version (`if torch_version <
    (2, 2):` still runs below 2.2: the floor is the release before)."""

    floor: tuple[int, int]
    release: tuple[int, int]
    line: int
    requires: bool

    def says(self, where: str) -> str:
        """Where the floor comes from, for a message: `where` is the file and line."""
        if self.requires:
            return f"its code requires torch {dotted_release(self.release)} at {where}"
        return f"its code tests torch's version against {dotted_release(self.release)} at {where}"


def code_gates(data: bytes) -> list[CodeGate]:
    """What the source `data` says of torch's version (`CodeGate`), per line that tests it against a release
    (1.x or 2.x; a comparison with it on the line, or a version helper or flag) or states a requirement; of
    several releases on a line, the lowest. CUDA's and Python's versions do not count (`torch.version.cuda`),
    nor a version printed or in a comment."""
    if not any(needle in data for needle in (b"ersion", b"ERSION", b"orch_greater", b"torch>", b"torch >")):
        return []
    found = []
    starts: set[int] = set()
    for name in (*_VERSION_NAMES, b"is_torch_", b"orch_at_least", b"ORCH_AT_LEAST", b"torch>", b"torch >"):
        at = data.find(name)
        while at != -1:
            starts.add(data.rfind(b"\n", 0, at) + 1)
            at = data.find(name, at + len(name))
    for start in sorted(starts):
        end = data.find(b"\n", start)
        text = data[start : end if end != -1 else len(data)].split(b"#", 1)[0]
        if b"torch" not in text.lower() or any(
            o in text for o in (b"version.cuda", b"version.hip", b"version_info")
        ):
            continue
        if not (
            _HELPER.search(text)
            or _REQUIREMENT_TEXT.search(text)
            or (_COMPARISON.search(text) and any(n in text for n in _VERSION_NAMES))
        ):
            continue
        releases = [
            release
            for match in _GATED_RELEASE.finditer(text)
            if (1, 0) <= (release := tuple(int(n) for n in match.groups() if n is not None)[:2]) < (3, 0)
        ]
        if releases:
            release, requires = min(releases), _REQUIREMENT_TEXT.search(text) is not None
            line = data.count(b"\n", 0, start) + 1
            found.append(CodeGate(release if requires else before(release), release, line, requires))
    return found


def median_gate(gates: list[tuple[tuple[int, int], str]]) -> tuple[tuple[int, int], str] | None:
    """The median of what a project's code says of its torch (the floor each line implies, and where that
    is said), the lower one of an even count."""
    return sorted(gates)[(len(gates) - 1) // 2] if gates else None


def dotted_release(release: tuple[int, int]) -> str:
    """`(2, 7)` as people write it: "2.7"."""
    return ".".join(map(str, release))


def before(release: tuple[int, int]) -> tuple[int, int]:
    """The minor release before `release` (torch 1.13 came before 2.0)."""
    return (release[0], release[1] - 1) if release[1] > 0 else (release[0] - 1, 13)


@lru_cache(maxsize=256)
def _project_folder(folder: Path) -> Path | None:
    """The project folder, or the `.dist-info` folder of the installed package `folder` is in."""
    for directory in (folder, *folder.parents):
        if (project := _project_at(directory)) is not None:
            return project
    return None


@lru_cache(maxsize=4096)  # every file's search passes the same parent folders
def _project_at(directory: Path) -> Path | None:
    if any((directory / name).is_file() for name in _PROJECT_FILES):
        return directory
    return _installed(directory.parent).get(directory.name) if directory.parent != directory else None


@lru_cache(maxsize=256)
def _installed(folder: Path) -> dict[str, Path]:
    """The `<name>-<version>.dist-info` folders in `folder` that hold a METADATA, by the name of each package
    they install: the distribution's own name, and the import names its `top_level.txt` lists, which may
    differ (`mace_torch-0.3.16.dist-info` installs `mace`, `fair_esm` installs `esm`)."""
    try:
        entries = [entry for entry in folder.iterdir() if entry.name.endswith(".dist-info")]
    except OSError:
        return {}
    found: dict[str, Path] = {}
    for entry in sorted(entries):
        if (entry / "METADATA").is_file():
            for name in (entry.name.split("-", 1)[0], *_top_level(entry)):
                found.setdefault(name, entry)
    return found


def _top_level(dist_info: Path) -> list[str]:
    """The top-level import names a `.dist-info` installs: those its `top_level.txt` lists, or, where it has
    none (wheels built by hatchling or flit: `pytorch_ignite` installs `ignite`), the first part of each path
    its `RECORD` lists (`ignite/__init__.py`; a module `six.py` at the top is `six`)."""
    try:
        text = (dist_info / "top_level.txt").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return _recorded(dist_info)
    return [line.strip() for line in text.splitlines() if line.strip().isidentifier()]


def _recorded(dist_info: Path) -> list[str]:
    try:
        text = (dist_info / "RECORD").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    names = set()
    for line in text.splitlines():
        first, slash, _ = line.partition(",")[0].partition("/")
        name = first if slash else first.removesuffix(".py")
        if name.isidentifier() and name != "__pycache__":
            names.add(name)
    return sorted(names)


@lru_cache(maxsize=64)
def _floor_of_project(project: Path | None) -> TorchFloor | None:
    declared = _declared_requirements(project)
    if declared is not None:
        return floor_of(*declared)
    if project is not None and project.name.endswith(".dist-info") and (metadata := _metadata(project)):
        return _floor_of_dependencies(project, metadata)
    return None


@lru_cache(maxsize=64)
def _declared_requirements(project: Path | None) -> tuple[list[str], str] | None:
    """The torch requirements the project's own metadata declares, and where (None: it names no torch)."""
    if project is None:
        return None
    if project.name.endswith(".dist-info"):
        metadata = _metadata(project)
        requirements = _from_metadata(metadata) if metadata is not None else []
        return (requirements, f"{project.name}/METADATA") if requirements else None
    for name, read in _READERS:
        path = project / name
        if not path.is_file():
            continue
        try:
            requirements = read(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, configparser.Error):
            continue  # an unreadable file declares nothing; the command that needs it reports it
        if requirements:
            return requirements, name
    return None


#: the torch TorchNeuron runs on (torch-neuronx 2.13.3 / 2.14.3)
TORCHNEURON_TORCH = (2, 13)


def torch_cap(folder: Path) -> TorchFloor | None:
    """The newest torch the project that holds `folder` allows, when every torch requirement it declares
    stops below the torch TorchNeuron needs (chai_lab's `torch<2.7`, review 50): the move to Trainium starts
    with raising that bound. None otherwise."""
    declared = _declared_requirements(project_of(folder))
    if declared is None:
        return None
    requirements, where = declared
    caps = [(cap, r) for r in requirements if (cap := upper_bound(r)) is not None and cap < TORCHNEURON_TORCH]
    if len(caps) < len(requirements):  # one of them allows TorchNeuron's torch
        return None
    version, requirement = max(caps)
    return TorchFloor(version, f"`{requirement.strip()}` in {where}")


def cap_note(caps: Iterable[str]) -> str | None:
    """What the summary of `scan` and `fix` says about the projects whose torch requirement stops below the
    torch TorchNeuron needs (`FixStyle.torch_cap` texts), or None."""
    found = sorted(set(caps))
    if not found:
        return None
    return (
        f"TorchNeuron needs torch {dotted_release(TORCHNEURON_TORCH)}, which "
        + (
            "the project's torch requirement excludes: "
            if len(found) == 1
            else "these torch requirements exclude: "
        )
        + "; ".join(found)
        + ". The move to Trainium starts with raising that bound (and testing on the newer torch)."
    )


def upper_bound(requirement: str) -> tuple[int, int] | None:
    """The newest minor release a torch requirement allows (`torch<2.7` -> (2, 6), `torch==2.1.1` ->
    (2, 1)), or None when it sets no upper bound below the next major release."""
    caps = []
    for operator, major, minor, patch in _clauses(requirement):
        if operator == "<" and minor is None and major <= 2:
            caps.append(before((major, 0)))  # `torch<2`: 1.13 at most
        elif minor is None:
            continue
        elif operator == "<":
            caps.append((major, minor) if patch else before((major, minor)))  # `<2.7.1` allows 2.7.0
        elif operator in ("<=", "==", "===", "~") or (operator == "~=" and patch is not None):
            caps.append((major, minor))
    return min(caps) if caps else None


def _clauses(requirement: str) -> list[tuple[str | None, int, int | None, int | None]]:
    """(operator, major, minor, patch) of each version clause of a torch requirement (`torch>=2.1.2,<3` ->
    (">=", 2, 1, 2), ("<", 3, None, None)); none when it is not one for torch."""
    match = _REQUIREMENT.match(requirement)
    found = []
    for clause in match.group(1).split(",") if match else ():
        parsed = _CLAUSE.match(clause)
        if parsed is None:
            continue
        operator, major, minor = parsed.groups()
        patch = re.match(r"\s*\D*\d+\.\d+\.(\d+)", clause)
        found.append(
            (
                operator,
                int(major),
                int(minor) if minor and minor != "*" else None,
                int(patch.group(1)) if patch else None,
            )
        )
    return found


def _floor_of_dependencies(project: Path, metadata: str) -> TorchFloor | None:
    """For an installed package whose METADATA names no torch: the highest torch floor among the installed
    packages beside it that it requires (one level). Its users need all of them: trl requires accelerate
    (`torch>=2.0.0`) and transformers (`torch>=2.6` for its torch extra), so trl runs on torch 2.6."""
    siblings = {_normalized(name): path for name, path in _installed(project.parent).items()}
    floors = []
    for name in _required_names(metadata):
        dependency = siblings.get(name)
        if dependency is None or dependency == project or (theirs := _metadata(dependency)) is None:
            continue
        if (floor := _declared_in(dependency, theirs)) is not None:
            floors.append(floor)
    if not floors:
        return None
    highest = max(floors, key=lambda floor: floor.version)
    package = project.name.split("-", 1)[0]
    return TorchFloor(highest.version, f"{highest.source}, which {package} requires")


def _metadata(info: Path) -> str | None:
    """The text of a `.dist-info` folder's METADATA, or None when it cannot be read (it declares nothing)."""
    try:
        return (info / "METADATA").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _declared_in(info: Path, metadata: str) -> TorchFloor | None:
    """The floor a distribution's own `Requires-Dist` lines declare for torch, if any."""
    requirements = _from_metadata(metadata)
    return floor_of(requirements, f"{info.name}/METADATA") if requirements else None


def _required_names(metadata: str) -> list[str]:
    """The normalized names of the distributions a METADATA's `Requires-Dist` lines always need."""
    names = []
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:"):
            requirement = line[len("Requires-Dist:") :].strip()
            if "extra" not in requirement.partition(";")[2] and (name := _NAME.match(requirement)):
                names.append(_normalized(name.group(0)))
    return names


def _normalized(name: str) -> str:
    """A distribution name as the packaging specifications compare it (`Foo.Bar-baz` == `foo_bar_baz`)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def floor_of(requirements: list[str], where: str) -> TorchFloor | None:
    """The lowest lower bound among torch `requirements` (None if one has none: that one allows any torch)."""
    floors = []
    for requirement in requirements:
        version = lower_bound(requirement)
        if version is None:
            return None
        floors.append((version, requirement))
    version, requirement = min(floors)
    return TorchFloor(version, f"`{requirement.strip()}` in {where}")


def lower_bound(requirement: str) -> tuple[int, int] | None:
    """The minor release a torch requirement starts at (`torch>=2.1.2,<3` -> (2, 1)), or None without one."""
    bounds = [
        (major, minor or 0)
        for operator, major, minor, _ in _clauses(requirement)
        if operator in (None, "===", "==", "~=", ">=", ">", "^", "~")
    ]
    return max(bounds) if bounds else None


def _torch_entries(entries: object) -> list[str]:
    if not isinstance(entries, list):
        return []
    return _torch_requirements(e for e in entries if isinstance(e, str))


def _torch_requirements(lines) -> list[str]:
    """The requirement strings among `lines` that are for `torch` itself, not `torchvision` or
    `torch-neuronx`."""
    found = []
    for line in lines:
        rest = line.strip()[5:]
        if _REQUIREMENT.match(line) and (not rest or not (rest[0].isalnum() or rest[0] in "-_.")):
            found.append(line)
    return found


def _from_pyproject(text: str) -> list[str]:
    document = tomllib.loads(text)
    project = document.get("project", {})
    found = _torch_entries(project.get("dependencies"))
    if not found and isinstance(extras := project.get("optional-dependencies"), dict):
        found = [e for group in extras.values() for e in _torch_entries(group)]
    if not found:
        poetry = document.get("tool", {}).get("poetry", {}).get("dependencies", {})
        spec = poetry.get("torch") if isinstance(poetry, dict) else None
        spec = spec.get("version") if isinstance(spec, dict) else spec
        if isinstance(spec, str):
            found = [f"torch{spec}" if spec[:1] in "<>=!~^" else f"torch=={spec}"]
    return found


def _from_setup_cfg(text: str) -> list[str]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    values = []
    if parser.has_option("options", "install_requires"):
        values.append(parser.get("options", "install_requires"))
    if parser.has_section("options.extras_require"):
        values.extend(value for _, value in parser.items("options.extras_require"))
    return _torch_requirements(line.strip() for value in values for line in value.splitlines())


def _from_setup_py(text: str) -> list[str]:
    return [match.group(1) for match in _QUOTED.finditer(text)]


def _from_metadata(text: str) -> list[str]:
    """An installed distribution's `Requires-Dist` torch requirements: those it always needs, else those of
    its extras (`torch>=2.6; extra == "torch"`, as transformers declares it)."""
    prefix = "Requires-Dist:"
    lines = [line[len(prefix) :].strip() for line in text.splitlines() if line.startswith(prefix)]
    found = _torch_requirements(lines)
    required = [r for r in found if "extra" not in r.partition(";")[2]]
    return required or found


def _from_requirements(text: str) -> list[str]:
    return _torch_requirements(line.split("#")[0].strip() for line in text.splitlines())


_READERS = (
    ("pyproject.toml", _from_pyproject),
    ("setup.cfg", _from_setup_cfg),
    ("setup.py", _from_setup_py),
    ("requirements.txt", _from_requirements),
)


#: the first torch without builds for a Python 3 minor (and all older ones): torch 1.6 dropped Python 3.5
#: (pytorch/pytorch#35677), torch 1.11 Python 3.6 (pytorch/pytorch#70457), torch 2.0 needs Python 3.8,
#: torch 2.5 has no Python 3.8 wheels (pytorch/pytorch#138979), torch 2.9 needs Python 3.10
#: (pytorch/pytorch#161167)
_FIRST_TORCH_WITHOUT = {5: (1, 6), 6: (1, 11), 7: (2, 0), 8: (2, 5), 9: (2, 9)}
_PYTHON_LOWER = re.compile(r"(?:>=|~=|\^|==)\s*3\.(\d+)|>\s*3\.(\d+)")


def python_cap(folder: Path) -> TorchFloor | None:
    """For a project whose metadata bounds no torch: the newest torch its oldest supported Python can run,
    when that is an old one (`Requires-Python: >=3.8`: its Python 3.8 users have torch 2.4 at most, so a fix
    that needs a newer torch breaks them; stable-ts, review 45). None otherwise."""
    return _python_cap_of(project_of(folder))


@lru_cache(maxsize=64)
def _python_cap_of(project: Path | None) -> TorchFloor | None:
    declared = _oldest_python(project) if project is not None else None
    if declared is None or declared[0] > max(_FIRST_TORCH_WITHOUT):
        return None
    minor, said = declared
    minor = max(minor, min(_FIRST_TORCH_WITHOUT))  # Python 3.4 users have torch 1.5 or older, too
    first = _FIRST_TORCH_WITHOUT[minor]
    return TorchFloor(
        before(first), f"{said}, and torch {dotted_release(first)} and newer need Python 3.{minor + 1}"
    )


def _oldest_python(project: Path) -> tuple[int, str] | None:
    """The oldest Python 3 minor the project supports, and where it says so: its Python requirement
    (`Requires-Python` of an installed package's METADATA, `[project] requires-python` or poetry's `python`
    of pyproject.toml, `python_requires` of setup.cfg or setup.py), else the oldest Python its trove
    classifiers list (`Programming Language :: Python :: 3.7`: facexlib declares no requirement, review
    47)."""
    texts = []
    if project.name.endswith(".dist-info"):
        metadata = _metadata(project) or ""
        texts.append((f"{project.name}/METADATA", metadata))
        for line in metadata.splitlines():
            if line.startswith("Requires-Python:"):
                return _python_floor(line.partition(":")[2], f"{project.name}/METADATA")
    else:
        for name in _PROJECT_FILES:
            try:
                text = (project / name).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            texts.append((name, text))
            if (found := _PYTHON_READERS[name](text)) is not None:
                return _python_floor(found, name)
    for where, text in texts:
        minors = [int(minor) for minor in _PYTHON_CLASSIFIER.findall(text)]
        if minors:
            return min(minors), f"its classifiers list Python 3.{min(minors)} in {where}"
    return None


def _python_floor(text: str, where: str) -> tuple[int, str] | None:
    """The oldest Python 3 minor a requirement (`>=3.8`, `~=3.9`, `^3.8`, `>3.8`) allows, and how to say
    it."""
    match = _PYTHON_LOWER.search(text)
    if match is None:
        return None
    minor = int(match.group(1) or match.group(2)) + (1 if match.group(2) else 0)
    return minor, f"its Python is `{text.strip()}` in {where}"


#: a trove classifier naming a Python 3 minor (in METADATA, pyproject.toml, setup.cfg or setup.py)
_PYTHON_CLASSIFIER = re.compile(r"Programming Language :: Python :: 3\.(\d+)\b")


def _python_in_pyproject(text: str) -> str | None:
    try:
        document = tomllib.loads(text)
    except ValueError:
        return None
    found = document.get("project", {}).get("requires-python")
    poetry = document.get("tool", {}).get("poetry", {}).get("dependencies", {})
    if not isinstance(found, str) and isinstance(poetry, dict):
        found = poetry.get("python")
    return found if isinstance(found, str) else None


def _python_in_setup(text: str) -> str | None:
    """`python_requires` of setup.cfg (`python_requires = >=3.8`) or setup.py (`python_requires=">=3.8"`)."""
    match = _PYTHON_REQUIRES.search(text)
    return match.group(1) if match else None


_PYTHON_REQUIRES = re.compile(r"""python_requires\s*=\s*["']?([^"'\r\n,)]+)""")
_PYTHON_READERS = {
    "pyproject.toml": _python_in_pyproject,
    "setup.cfg": _python_in_setup,
    "setup.py": _python_in_setup,
}
