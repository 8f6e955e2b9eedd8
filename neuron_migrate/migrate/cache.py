"""A scan cache keyed by file path, content hash and rule-set version, so an unchanged tree re-scans for free.

One JSON file per rule-set version and selection under the cache directory (`.neuron-migrate-cache/` in the
working directory by default). A cache that cannot be read or written is silently ignored: it only ever
saves time, it never changes a result.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path

from neuron_migrate import __version__
from neuron_migrate.model import Finding, _build, to_dict


@lru_cache(maxsize=1)
def ruleset_version() -> str:
    """A hash of the tool version and the source of the scan engine and every rule."""
    package = Path(__file__).parent
    digest = hashlib.sha256(__version__.encode())
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class ScanCache:
    """Findings per file, valid while the file's content hash, the rules and the selection are unchanged."""

    def __init__(self, directory: Path | None, selection_key: str) -> None:
        self.file = None
        self.entries: dict[str, dict] = {}
        self.dirty = False
        self.found = False  # whether a cache of this rule-set version and selection was read
        if directory is None:
            return
        key = hashlib.sha256(f"{ruleset_version()}\0{selection_key}".encode()).hexdigest()[:16]
        self.file = directory / f"scan-{key}.json"
        try:
            entries = json.loads(self.file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(entries, dict):
            self.entries, self.found = entries, True

    def get(self, rel: str, digest: str) -> list[Finding] | None:
        entry = self.entries.get(rel)
        if entry is None or entry.get("hash") != digest:
            return None
        return [_build(Finding, item, "cache") for item in entry["findings"]]

    def put(self, rel: str, digest: str, findings: list[Finding]) -> None:
        if self.file is None:
            return
        self.entries[rel] = {"hash": digest, "findings": [to_dict(f) for f in findings]}
        self.dirty = True

    def save(self) -> None:
        """Write the cache atomically; never fail the scan because of it."""
        if self.file is None or not self.dirty:
            return
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            gitignore = self.file.parent / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("# created by neuron-migrate\n*\n", encoding="utf-8")
            fd, tmp = tempfile.mkstemp(dir=self.file.parent, prefix=".scan-", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(self.entries, out, separators=(",", ":"))
            os.replace(tmp, self.file)
        except OSError:
            pass
