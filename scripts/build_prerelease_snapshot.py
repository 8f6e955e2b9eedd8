#!/usr/bin/env python
"""Regenerate the shipped pre-release opdb snapshot from ../shared/data/torchneuron-prerelease-ops.tsv.

Usage: scripts/build_prerelease_snapshot.py [TSV] [--out PATH]
(default out: neuron_migrate/opdb/data/<version>.json). Same as
`python -m neuron_migrate.opdb.importers.prerelease_tsv [TSV] [--out PATH]`.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neuron_migrate.opdb.importers.prerelease_tsv import main

if __name__ == "__main__":
    sys.exit(main())
