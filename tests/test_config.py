"""`[tool.neuron-migrate]`: what is validated, and how `api.scan_options` merges it with the options."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_migrate.api import Options, scan_options
from neuron_migrate.config import load_config
from neuron_migrate.errors import ConfigError


def _project(tmp_path: Path, table: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(f"[tool.neuron-migrate]\n{table}\n")
    return tmp_path


def test_a_key_nothing_reads_is_an_unknown_key(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key 'opdb'; known keys: .*target-torch"):
        load_config(_project(tmp_path, 'opdb = "2.14.3"'))


def test_target_torch_reaches_the_fixes(tmp_path):
    root = _project(tmp_path, 'target-torch = "2.10"')
    assert scan_options(Options(paths=(root,), root=root)).target_torch == (2, 10)


def test_flags_replace_select_and_include_and_add_to_ignore_and_exclude(tmp_path):
    table = (
        'select = ["NM1"]\nignore = ["NM8"]\ninclude = ["src/*"]\nexclude = ["third_party"]\n'
        "jobs = 3\nrespect-gitignore = true"
    )
    root = _project(tmp_path, table)
    merged = scan_options(
        Options(
            paths=(root,),
            root=root,
            select=("NM4",),
            ignore=("NM9",),
            include=("a/*",),
            exclude=("b",),
            respect_gitignore=False,
            cache=False,
        )
    )
    assert (merged.select, merged.ignore) == (("NM4",), ("NM8", "NM9"))
    assert (merged.selection.include, merged.selection.exclude) == (("a/*",), ("third_party", "b"))
    assert (merged.jobs, merged.selection.respect_gitignore, merged.cache_dir) == (3, False, None)
    defaults = scan_options(Options(paths=(root,), root=root))
    assert (defaults.select, defaults.selection.include, defaults.jobs) == (("NM1",), ("src/*",), 3)
    assert defaults.cache_dir == Path(".neuron-migrate-cache")
