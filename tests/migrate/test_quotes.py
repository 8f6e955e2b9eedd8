"""New literals follow the file's quotes (`quotes.py`)."""

from __future__ import annotations

from neuron_migrate.migrate.quotes import in_quotes, preferred_quote

from .helpers import fixed


def test_a_file_clearly_in_single_quotes_gets_single_quoted_new_code():
    """composer writes `torch.device('cpu')`; a fix there wrote `torch.device("cpu")` beside it."""
    source = (
        "import torch\nNAMES = ('a', 'b', 'c')\ndef place(x):\n    log('moving')\n"
        "    return x.to(torch.device('cuda' if torch.cuda.is_available() else 'cpu'))\n"
    )
    assert "or torch.device('cpu'))" in fixed(source)
    doubled = source.replace("'", '"')
    assert 'or torch.device("cpu"))' in fixed(doubled)


def test_the_style_must_be_clear():
    assert preferred_quote("x = 'a'\ny = 'b'\n") == '"'  # too few to tell
    assert preferred_quote("x = ['a', 'b', 'c', 'd']\n") == "'"
    assert preferred_quote("x = ['a', 'b', 'c', 'd', \"e\", \"f\", \"g\"]\n") == '"'
    assert preferred_quote("'''Doc.'''\nx = 'a'\n") == '"'  # docstrings do not count


def test_only_literals_that_read_the_same_change():
    text = 'f(x, "cpu", "it\'s", "a\\\\b", f"{d.type}:0", rb"raw", """doc""")'
    assert in_quotes(text, "'") == 'f(x, \'cpu\', "it\'s", "a\\\\b", f\'{d.type}:0\', rb"raw", """doc""")'
    assert in_quotes("torch.device(\n", "'") == "torch.device(\n"  # a fragment with an open bracket
    assert in_quotes('g("x")', '"') == 'g("x")'
