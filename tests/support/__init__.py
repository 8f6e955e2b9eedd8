"""Test helpers and data that more than one test package uses (package-local ones stay in their folder)."""

from __future__ import annotations

from pathlib import Path

#: opdb inputs: a compatibility table, registrations, a pre-release excerpt, a stand-in configuration
OPDB_FIXTURES = Path(__file__).resolve().parent / "opdb"
