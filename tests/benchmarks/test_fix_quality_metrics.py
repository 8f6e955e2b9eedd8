"""benchmarks/fix_quality.py counts what it claims: hand-written before/after pairs with a known number of
each defect (and look-alikes that must not count)."""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from benchmarks.fixq.analysis import analyse
from benchmarks.fixq.changes import FilePair
from benchmarks.fixq.linelimit import line_length, search_boundary

DEV = 'torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")'
GUARD = "if torch.accelerator.is_available():"


def counts(before: str, after: str, limit: int = 88) -> dict[str, int]:
    tallies = analyse(FilePair("pkg/m.py", textwrap.dedent(before), textwrap.dedent(after), limit))
    return {metric: tally.count for metric, tally in tallies.items()}


def count(metric: str, before: str, after: str, limit: int = 88) -> int:
    return counts(before, after, limit).get(metric, 0)


# --- long lines -------------------------------------------------------------------------------------------


def test_long_lines_count_only_lines_the_fix_made_long():
    long_old = "x = " + "a" * 100
    before = f"{long_old}\ny = torch.cuda.synchronize()\nz = 1\n"
    after = f"{long_old}\ny = torch.get_device_module({DEV}).synchronize()\nz = 2\n"
    assert count("long_lines", before, after) == 1
    assert count("long_lines", before, after, limit=200) == 0


def test_a_long_line_rewritten_into_another_long_line_is_not_new():
    before = "f(" + "a, " * 40 + "'cuda')\n"
    after = "f(" + "a, " * 40 + "DEV)\n"
    assert count("long_lines", before, after) == 0


def test_line_limit_comes_from_the_nearest_config_below_the_boundary(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.black]\nline-length = 100\n")
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "setup.cfg").write_text("[flake8]\nmax-line-length = 120\n")
    (tmp_path / "pkg" / "sub" / "ruff.toml").write_text("line-length = 79\n")
    file = tmp_path / "pkg" / "sub" / "m.py"
    assert line_length(file, tmp_path) == 79
    assert line_length(tmp_path / "pkg" / "m.py", tmp_path) == 120
    assert line_length(tmp_path / "x.py", tmp_path) == 100
    # an installed package: configuration above its own folder is not the package's
    (tmp_path / "pkg" / "installed").mkdir()
    assert line_length(tmp_path / "pkg" / "installed" / "m.py", tmp_path / "pkg" / "installed") == 88


def test_a_folder_its_git_work_tree_ignores_is_searched_like_an_installed_package(tmp_path):
    """The benchmark's own `.trees/small/accelerate` is not neuron-migrate's code: its limit is not ours."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("vendored/\n")
    for name in ("vendored", "src"):
        (tmp_path / name).mkdir()
    assert search_boundary(tmp_path / "vendored") == (tmp_path / "vendored").resolve()
    assert search_boundary(tmp_path / "src") == tmp_path.resolve()


# --- idiom repeats ----------------------------------------------------------------------------------------


def test_idiom_twice_in_a_function_and_twice_in_one_statement():
    before = """\
    def f(x):
        x = x.cuda()
        y = torch.zeros(1, device="cuda")
        return torch.cuda.get_rng_state(), x, y
    g = torch.device('cuda')
    """
    after = f"""\
    def f(x):
        x = x.to({DEV})
        y = torch.zeros(1, device={DEV.replace('"', "'")})
        return torch.get_device_module(({DEV}).type).get_rng_state(({DEV}).type), x, y
    g = {DEV}
    """
    found = counts(before, after)
    assert found["idiom_repeats"] == 3  # four copies in f; module level has one
    assert found["idiom_repeats_in_statement"] == 1


def test_idiom_once_per_function_is_fine_and_old_repeats_are_not_the_fix():
    before = f"""\
    def f():
        return {DEV}, {DEV}
    def g():
        return torch.device("cuda")
    """
    after = f"""\
    def f():
        return {DEV}, {DEV}
    def g():
        return {DEV}
    """
    found = counts(before, after)
    assert found["idiom_repeats"] == 0 and found["idiom_repeats_in_statement"] == 0


def test_property_and_setter_are_two_functions():
    before = (
        "class A:\n    @property\n    def d(self): return 'cuda'\n    @d.setter\n"
        "    def d(self, v): v.cuda()\n"
    )
    after = (
        f"class A:\n    @property\n    def d(self): return ({DEV}).type\n    @d.setter\n"
        f"    def d(self, v): v.to({DEV})\n"
    )
    assert count("idiom_repeats", before, after) == 0


# --- guards in certain-accelerator code -------------------------------------------------------------------

CERTAIN = {
    "if_available": ("if torch.cuda.is_available():\n    x = 1\n    {stmt}\n", 1),
    "elif_available": ("if a:\n    pass\nelif torch.accelerator.is_available() and b:\n    {stmt}\n", 1),
    "else_of_not": ("if not torch.cuda.is_available():\n    x = 1\nelse:\n    {stmt}\n", 1),
    "after_return": ("def f():\n    if not torch.cuda.is_available():\n        return\n    {stmt}\n", 2),
    "after_raise_or": ("if cpu or not torch.cuda.is_available():\n    raise SystemExit\n{stmt}\n", 1),
    "after_continue": (
        "for i in r:\n    if not torch.cuda.is_available():\n        continue\n    {stmt}\n",
        2,
    ),
    "after_sys_exit": ("if not torch.cuda.is_available():\n    print('no')\n    sys.exit(1)\n{stmt}\n", 1),
    "after_assert": ("def f():\n    assert torch.cuda.is_available(), 'needs a GPU'\n    {stmt}\n", 2),
    "device_type_not_cpu": ("if device.type != 'cpu':\n    {stmt}\n", 1),
    "device_type_cuda": ("if 'cuda' == x.device.type:\n    {stmt}\n", 1),
    "else_of_type_cpu": ("if device.type == 'cpu':\n    pass\nelse:\n    {stmt}\n", 1),
    "derived_name": ("use_gpu = torch.cuda.is_available() and not args.cpu\nif use_gpu:\n    {stmt}\n", 1),
    "nested_def": ("if torch.cuda.is_available():\n    def f():\n        {stmt}\n", 2),
    "with_in_body": ("if torch.cuda.is_available():\n    with ctx:\n        {stmt}\n", 2),
}
POSSIBLE = {
    "top_level": ("x = 1\n{stmt}\n", 0),
    "else_of_available": ("if torch.cuda.is_available():\n    pass\nelse:\n    {stmt}\n", 1),
    "no_exit": ("if not torch.cuda.is_available():\n    print('slow')\n{stmt}\n", 0),
    "exit_not_last": ("if not torch.cuda.is_available():\n    if a:\n        return\n    x = 1\n{stmt}\n", 0),
    "or_test": ("if torch.cuda.is_available() or b:\n    {stmt}\n", 1),
    "type_not_cuda": ("if device.type != 'cuda':\n    {stmt}\n", 1),
    "name_also_param": ("use = torch.cuda.is_available()\ndef f(use):\n    if use:\n        {stmt}\n", 2),
    "name_reassigned": ("use = torch.cuda.is_available()\nuse = args.use\nif use:\n    {stmt}\n", 1),
}


def _guard_pair(template: str, depth: int) -> tuple[str, str]:
    pad = "    " * depth
    before = template.format(stmt="torch.cuda.synchronize()")
    after = template.format(stmt=f"{GUARD}\n{pad}    torch.accelerator.synchronize()")
    return before, after


@pytest.mark.parametrize("case", CERTAIN)
def test_an_added_guard_where_an_accelerator_is_certain_counts(case):
    assert count("nested_guards", *_guard_pair(*CERTAIN[case])) == 1


@pytest.mark.parametrize("case", POSSIBLE)
def test_an_added_guard_where_an_accelerator_is_only_possible_does_not(case):
    assert count("nested_guards", *_guard_pair(*POSSIBLE[case])) == 0


def test_conditional_expression_guards_count_too():
    before = "if torch.cuda.is_available():\n    kw = dict(pin=True)\n"
    after = (
        "if torch.accelerator.is_available():\n"
        "    kw = dict(pin=True if torch.accelerator.is_available() else False)\n"
    )
    assert count("nested_guards", before, after) == 1
    inline = "y = x if torch.cuda.is_available() and (a if torch.accelerator.is_available() else b) else z\n"
    assert count("nested_guards", "y = 1\n", inline) == 1


def test_a_renamed_guard_is_not_an_added_one():
    before = "if torch.cuda.is_available():\n    if torch.cuda.is_available():\n        f()\n"
    after = "if torch.accelerator.is_available():\n    if torch.accelerator.is_available():\n        f()\n"
    assert count("nested_guards", before, after) == 0


# --- adjacent duplicates, untouchable edits, parse failures -----------------------------------------------


def test_identical_adjacent_statements_the_fix_created():
    before = """\
    def seed(s):
        torch.manual_seed(s)
        torch.cuda.manual_seed(s)
        x += 1
        x += 1
    """
    after = """\
    def seed(s):
        torch.manual_seed(s)
        torch.manual_seed( s )  # same statement, other spacing
        x += 1
        x += 1
    """
    assert count("adjacent_duplicates", before, after) == 1


def test_pin_memory_and_cudnn_edits():
    before = """\
    loader = DataLoader(ds, pin_memory=True)
    torch.backends.cudnn.benchmark = True
    x = x.pin_memory()
    y = x.cuda()  # pin_memory is not on this line
    """
    after = """\
    loader = DataLoader(ds, pin_memory=torch.accelerator.is_available())
    if torch.accelerator.is_available():
        x = x.pin_memory()
    y = x.to(DEV)  # pin_memory is not on this line
    """
    # the value changed, the flag removed, the pin guarded (indented); the last line changed elsewhere
    assert count("pin_memory_cudnn_edits", before, after) == 3
    untouched = "loader = DataLoader(ds, pin_memory=True)\ny = x.cuda()\n"
    assert count("pin_memory_cudnn_edits", untouched, untouched.replace("x.cuda()", "x.to(DEV)")) == 0
    elsewhere = "x = x.pin_memory().cuda(non_blocking=True)\n"  # torch's compiled_autograd.py
    assert count("pin_memory_cudnn_edits", elsewhere, elsewhere.replace(".cuda(", ".to(DEV, ")) == 0
    assert count("pin_memory_cudnn_edits", elsewhere, elsewhere.replace(".pin_memory()", "")) == 1


def test_a_file_left_unparseable_is_counted_and_skips_the_ast_metrics():
    found = counts("x = torch.cuda.is_available()\n", "x = torch.accelerator.is_available(\n")
    assert found["broken_by_fix"] == 1
    assert "nested_guards" not in found
    assert counts("x = 1\n", "x = 2\n").get("broken_by_fix", 0) == 0
