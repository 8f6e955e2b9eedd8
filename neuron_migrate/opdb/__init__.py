"""opdb: the operator database (versioned op x dtype support on torch-neuronx, with provenance), its importers
and probe, plus the stand-in `neuron` device and the tracer (device.py, trace.py)."""

from neuron_migrate.opdb.db import (
    Snapshot,
    Support,
    available_versions,
    load_snapshot,
    load_snapshot_file,
)

__all__ = ["Snapshot", "Support", "available_versions", "load_snapshot", "load_snapshot_file"]
