"""Per-statement positions equal libcst's whole-module `PositionProvider` for every node, or fall back to
it."""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from neuron_migrate.migrate.positions import StatementPositions, index_statements

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
