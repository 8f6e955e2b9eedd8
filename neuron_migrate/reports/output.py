"""One helper that writes rendered output to a file (atomically) or to stdout."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from neuron_migrate.errors import UsageError


def write_output(text: str, output: Path | None) -> None:
    """Write `text` to `output` via a temp file and rename, or to stdout when `output` is None or `-`."""
    if output is None or str(output) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    if output.exists() and not output.is_file():  # /dev/null, a FIFO, /dev/stdout: write through, never replace
        try:
            with open(output, "w", encoding="utf-8", newline="") as out:
                out.write(text)
        except OSError as err:
            raise UsageError(f"--output {output}: cannot write ({err.strerror})") from None
        return
    folder = output.absolute().parent
    if not folder.is_dir():
        raise UsageError(f"--output {output}: folder {folder} does not exist; create it or pick another path")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{output.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        os.replace(tmp, output)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise UsageError(f"--output {output}: cannot write ({err.strerror})") from None
