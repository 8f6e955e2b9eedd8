"""Writing output (atomic for files, write-through for devices, never replace /dev/null) and CLI usage
errors."""

from __future__ import annotations

import os
import stat

import pytest

from neuron_migrate.errors import UsageError
from neuron_migrate.reports.output import write_output


def test_file_is_replaced_atomically(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    write_output("new", target)
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_fifo_is_written_through_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    write_output("hello", fifo)
    assert os.read(reader, 100) == b"hello"
    os.close(reader)
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_dev_null_stays_a_device():
    write_output("discarded", __import__("pathlib").Path(os.devnull))
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_missing_folder_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        write_output("x", tmp_path / "nope" / "out.json")


@pytest.mark.parametrize("args", [("scan", "--bogus"), ("fix", "--no-such-flag"), ("scan", "--jobs", "many")])
def test_command_line_mistakes_exit_2_without_a_traceback(run_cli, args):
    """Unknown options and bad values are usage errors (exit 2), whichever click typer uses."""
    proc = run_cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert args[1] in proc.stderr


def test_new_file_gets_the_usual_mode_and_a_replaced_file_keeps_its_own(tmp_path):
    mask = os.umask(0o022)
    try:
        fresh = tmp_path / "report.html"
        write_output("x", fresh)
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o644
        kept = tmp_path / "shared.json"
        kept.write_text("old")
        kept.chmod(0o640)
        write_output("new", kept)
        assert stat.S_IMODE(kept.stat().st_mode) == 0o640
    finally:
        os.umask(mask)
