"""One helper that writes rendered output to a file (atomically) or to stdout."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from neuron_migrate.errors import UsageError


def write_output(text: str, output: Path | None, option: str = "--output") -> None:
    """Write `text` to `output` via a temp file and rename, or to stdout when `output` is None or `-`;
    `option` names where the path came from in an error (`--patch`, `--junit`)."""
    if output is None or str(output) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    if (
        output.exists() and not output.is_file()
    ):  # /dev/null, a FIFO, /dev/stdout: write through, never replace
        try:
            with open(output, "w", encoding="utf-8", newline="") as out:
                out.write(text)
        except OSError as err:
            raise UsageError(f"{option} {output}: cannot write ({err.strerror})") from None
        return
    folder = output.absolute().parent
    if not folder.is_dir():
        raise UsageError(f"{option} {output}: folder {folder} does not exist; create it or pick another path")
    mode = output.stat().st_mode & 0o7777 if output.is_file() else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{output.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        os.chmod(tmp, mode)  # mkstemp makes 0600: keep a replaced file's mode, give a new one the usual one
        os.replace(tmp, output)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise UsageError(f"{option} {output}: cannot write ({err.strerror})") from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
