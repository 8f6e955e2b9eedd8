"""Per-statement positions equal libcst's whole-module `PositionProvider` for every node, or fall back to
it."""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from neuron_migrate.migrate.positions import StatementPositions, index_statements
from neuron_migrate.migrate.walk import find

SOURCES = {
    "plain": "import torch\n\nx = torch.cuda.is_available()\n",
    "decorated": "# head\n\n\n@decorator(\n    1)\n\n@other\ndef f():\n    return torch.cuda.synchronize()\n",
    "semicolons": "a = 1; b = torch.cuda\nc = 3  # note\n",
    "nested": "class A:\n    def f(self):\n        if x:\n            y = z.cuda()\n\n\n\n"
    "# trailing comment\n",
    "docstring_and_blank_lines": '"""Doc."""\n\n\n\nimport torch\nif True:\n    pass\nelse:\n    q = 1\n',
    "no_final_newline": "x = 1\ny = torch.device('cuda')",
    "crlf": "x = 1\r\n\r\ny = f(\r\n  2)\r\n",
    "continuation": "x = 1 + \\\n    2\nz = (\n    3)\n",
}


@pytest.mark.parametrize("name", SOURCES)
def test_every_node_matches_the_whole_module_pass(name):
    source = SOURCES[name]
    module = cst.parse_module(source)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    positions = StatementPositions(module, source, *index_statements(module))
    for statement in module.body:
        positions[statement]  # resolve statement by statement
    assert not positions.whole_file, "the shortcut should apply to ordinary code"
    assert {node: positions[node] for node in expected} == dict(expected)


def test_code_ast_cannot_parse_falls_back_to_the_whole_module():
    source = "type Alias = list[int]\nx = torch.cuda.synchronize()\n"  # 3.12 syntax: libcst parses it
    module = cst.parse_module(source)
    positions = StatementPositions(module, source, *index_statements(module))
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    assert positions[module.body[1]] == expected[module.body[1]]
    assert positions.whole_file


def test_a_statement_in_a_match_case_is_placed_by_itself():
    """A `case` body is indented twice below its `match` (inductor's `ir.py`): the case's own indentation
    counts, or the regenerated line misses the file's and the whole module is placed (6 s on that file)."""
    source = (
        "def f(x):\n    match x:\n        case 1:\n            y = torch.cuda.is_available()\n"
        "        case _:\n            pass\n"
    )
    module = cst.parse_module(source)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    positions = StatementPositions(module, source, *index_statements(module))
    statement = module.body[0].body.body[0].cases[0].body.body[0]
    assert positions[statement] == expected[statement]
    assert not positions.whole_file


def _long_statements() -> str:
    """Statements longer than `PART_LINES`: a list of calls (with a non-ASCII string before a part on its
    line), a call with keywords, a dict, a decorated class, a `with` and an `if` whose headers name CUDA."""
    calls = "".join(
        f'    "ü", OpInfo("op{i}",\n           dtypes=f(torch.float{i}), device="cuda"),\n' for i in range(30)
    )
    keywords = "".join(f"    k{i}=torch.cuda.is_available() or {i},\n" for i in range(45))
    entries = "".join(f'    "key{i}": torch.device("cuda:{i}"),\n' for i in range(45))
    body = "".join(f"    def m{i}(self):\n        return {i}\n" for i in range(25))
    lines = "".join(f"    x{i} = {i}\n" for i in range(45))
    return (
        f"op_db = [\n{calls}]\n"
        f"result = build(\n    first,\n{keywords})\n"
        f"table = {{\n{entries}}}\n"
        f"@skipIf(not torch.cuda.is_available(), 'needs CUDA')\nclass Suite(Base):\n{body}"
        f"with torch.cuda.device(0), other():\n{lines}"
        f"if torch.cuda.is_available():\n{body}"
    )


def test_a_node_in_a_long_statement_is_placed_by_regenerating_the_part_that_holds_it():
    """A finding inside a 2,000-line `op_db = [...]` regenerated the whole statement, seconds per file:
    the innermost short expression holding it, paired with its `ast` node, is enough, and places every
    node exactly as the whole-module pass does."""
    source = _long_statements()
    module = cst.parse_module(source)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    positions = StatementPositions(module, source, *index_statements(module))
    for statement in module.body:
        header = {cst.ClassDef: "decorators", cst.With: "items", cst.If: "test"}.get(type(statement))
        where = getattr(statement, header) if header else statement
        deep = [
            node
            for part in (where if isinstance(where, tuple) else [where])
            for node in find(part, (cst.Attribute, cst.SimpleString))
            if module.code_for_node(node) == "torch.cuda" or "cuda" in getattr(node.value, "lower", str)()
        ]
        assert deep, module.code_for_node(statement)[:40]
        for node in deep:
            assert positions[node] == expected[node]
        assert id(statement) not in positions.done, f"placed whole: {module.code_for_node(statement)[:40]}"
    assert not positions.whole_file
    for statement in module.body:  # what no part reached comes from the statements, placed as before
        positions[statement]
    assert not positions.whole_file
    assert {node: positions[node] for node in expected} == dict(expected)
