"""The fleet's resumable cache: one JSON file per traced architecture, so a rerun only traces what changed.

An entry's key is a hash of everything its result depends on: model type, task, mode (inference / train),
device, the architecture's fixed tiny-config values (its `opdb/hf_overrides.json` entry, so editing an
override re-traces that model; the rest is derived by `opdb/hf_tiny.py`, whose source is in the digest), the
transformers, diffusers, torch and torch-neuronx versions, the opdb snapshot version and content digest, and
the neuron-migrate version (plus a digest of the tracer, tiny-config and fleet sources). The architecture
list of a task is cached per transformers and diffusers version, so a fully cached rerun starts no Python with
torch at all.

Results that may be load or harness trouble (a timeout, a crash) are not cached; a memory-bound kill is cached
with the bound it hit and reused only under the same bound.
A cache that cannot be read or written is ignored: it only saves time, it never changes a result.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

NOT_CACHED = ("timeout", "crash")
_LAYOUT = "1"  # bump when the entry format changes


def entry_key(parts: dict[str, Any]) -> str:
    """A stable hash of the key parts (a dict of JSON values)."""
    text = json.dumps({"layout": _LAYOUT, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class FleetCache:
    """Entries under `<directory>/fleet/`; `directory=None` turns the cache off."""

    def __init__(self, directory: Path | None) -> None:
        self.folder = Path(directory) / "fleet" if directory is not None else None

    def _read(self, name: str) -> Any:
        if self.folder is None:
            return None
        try:
            return json.loads((self.folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def _write(self, name: str, data: Any) -> None:
        if self.folder is None:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(data, handle)
            os.replace(tmp, self.folder / name)
        except OSError:
            pass  # a read-only or full disk costs a re-trace next time, nothing else

    def get(self, key: str) -> dict[str, Any] | None:
        """The record stored under `key`, or None."""
        data = self._read(f"{key}.json")
        return data if isinstance(data, dict) and data.get("key") == key else None

    def put(self, key: str, record: dict[str, Any]) -> None:
        """Store a record unless its outcome is about the harness rather than the model."""
        if record.get("outcome") not in NOT_CACHED:
            self._write(f"{key}.json", record)

    def get_mappings(self, transformers_version: str) -> dict[str, dict[str, str]] | None:
        """task -> {model_type: class} for this transformers version, if cached."""
        data = self._read(f"mappings-{transformers_version}.json")
        return data if isinstance(data, dict) else None

    def put_mappings(self, transformers_version: str, mappings: dict[str, dict[str, str]]) -> None:
        """Remember the task mappings of this transformers version."""
        self._write(f"mappings-{transformers_version}.json", mappings)
