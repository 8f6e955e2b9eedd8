"""Build (once) and load the stand-in's C++ extension, `csrc/` beside this file.

The build goes through `torch.utils.cpp_extension.load` into a cache directory keyed by a hash of the sources,
torch's version and the Python version, so two checkouts (or two torch installs) never share a stale build and
a rebuilt source is never mistaken for the old one. The directory is `$NEURON_MIGRATE_STANDIN_CACHE`, else
`$XDG_CACHE_HOME/neuron-migrate/standin` (default `~/.cache/...`). `cpp_extension` locks the directory while
it builds, so concurrent first uses (test workers) wait for one build instead of racing.

`available()` says whether a build can be tried (a C++ compiler and ninja on PATH); `load()` returns the
module or raises `ExtensionUnavailable` with the reason, and the device falls back to the pure-Python
stand-in.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from importlib import resources
from pathlib import Path
from types import ModuleType

SOURCES = ("allocator.cpp", "runtime.cpp", "tracking.cpp", "kernels.cpp", "minimal.cpp", "module.cpp")
HEADERS = ("standin.h", "tracking.h", "kernels.h")
_LOADED: ModuleType | None = None


class ExtensionUnavailable(RuntimeError):
    """The C++ stand-in cannot be built or loaded here (no compiler, no ninja, a failed build)."""


def source_dir() -> Path:
    """Where the extension's sources live (package data: shipped in the wheel)."""
    return Path(str(resources.files("neuron_migrate.opdb.tracer") / "csrc"))


def build_key() -> str:
    """A hash of everything the build depends on: sources, headers, torch and Python versions (read without
    importing torch, so the CLI can ask whether a build is needed)."""
    from importlib.metadata import version

    digest = hashlib.sha256()
    for name in (*SOURCES, *HEADERS):
        digest.update(name.encode())
        digest.update((source_dir() / name).read_bytes())
    digest.update(version("torch").encode())
    digest.update(sys.version.encode())
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    """The build directory for the current sources."""
    root = os.environ.get("NEURON_MIGRATE_STANDIN_CACHE")
    if root is None:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = str(Path(base) / "neuron-migrate" / "standin")
    return Path(root) / build_key()


def missing_tools() -> list[str]:
    """What a build needs and this machine lacks (empty when a build can be tried)."""
    missing = []
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        missing.append(f"a C++ compiler ({compiler})")
    if shutil.which("ninja") is None:
        missing.append("ninja")
    return missing


def is_built() -> bool:
    """Whether the current sources are already built in the cache (a load then costs no compile)."""
    return any(cache_dir().glob("neuron_standin_*.so"))


def load(verbose: bool = False) -> ModuleType:
    """The extension module, built on first use. Raises ExtensionUnavailable with the reason."""
    global _LOADED
    if _LOADED is not None:
        return _LOADED
    missing = missing_tools()
    if missing and not is_built():
        raise ExtensionUnavailable(f"cannot build the C++ stand-in: no {' and no '.join(missing)} on PATH")
    from torch.utils import cpp_extension

    build = cache_dir()
    build.mkdir(parents=True, exist_ok=True)
    name = f"neuron_standin_{build.name}"
    try:
        _LOADED = cpp_extension.load(
            name=name,
            sources=[str(source_dir() / s) for s in SOURCES],
            build_directory=str(build),
            extra_cflags=["-O2"],
            verbose=verbose,
        )
    except (OSError, RuntimeError, ImportError) as err:
        last = " ".join(str(err).split())[-300:]
        raise ExtensionUnavailable(f"the C++ stand-in did not build or load ({last})") from None
    return _LOADED


def main() -> int:
    """`python -m neuron_migrate.opdb.tracer.extension`: build the extension now (the trace runner does this
    before its first trace, so the build is never part of a timed trace). Exit 0 when it loads."""
    try:
        load(verbose="-v" in sys.argv)
    except ExtensionUnavailable as err:
        print(err, file=sys.stderr)
        return 1
    print(cache_dir())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
