"""The pre-pass (`prepass.py`, `lexicon.py`) only ever drops rules that cannot report: the fast path finds
exactly what the full libcst path finds. `benchmarks/scan_differential.py` checks the same over torch and
transformers."""

from __future__ import annotations

import time
from dataclasses import asdict

import libcst as cst
import pytest

from neuron_migrate.migrate import file_scan
from neuron_migrate.migrate.conditions import references
from neuron_migrate.migrate.file_scan import scan_file, scan_text
from neuron_migrate.migrate.fixes import FixStyle
from neuron_migrate.migrate.lexicon import lexicon
from neuron_migrate.migrate.names import dynamic_import_bindings, import_bindings
from neuron_migrate.migrate.patterns import QualifiedNameRule
from neuron_migrate.migrate.prepass import candidates
from neuron_migrate.migrate.rule import Rule, load_rules
from neuron_migrate.migrate.sources import SourceText
from neuron_migrate.migrate.walk import find

from .helpers import EXAMPLE_LAYOUT

RULES = load_rules()
CODES = tuple(code for code, rule in RULES.items() if not rule.file_level)
EXAMPLES = [(code, i, ex.code) for code, rule in RULES.items() for i, ex in enumerate(rule.INVALID)]
SOURCES = EXAMPLES + [(code, i, src) for code, rule in RULES.items() for i, src in enumerate(rule.VALID)]


@pytest.mark.parametrize(
    ("code", "index", "source"), EXAMPLES, ids=[f"{c}-invalid-{i}" for c, i, _ in EXAMPLES]
)
def test_a_rule_is_kept_for_every_example_it_flags(code, index, source):
    assert code in candidates(source, CODES)


#: rules that state no pre-pass condition on purpose, each with the reason (`"NM123": "why"`): they are
#: analysed in every file their byte triggers let through. Today every rule states one.
ALWAYS_ANALYSED: dict[str, str] = {}


def _states_a_condition(rule: type[Rule]) -> bool:
    """Whether the rule narrows `Rule.can_report`: overrides it, or declares its findings `names_only`."""
    owner = next(klass for klass in rule.__mro__ if "can_report" in vars(klass))
    return rule.names_only if owner is QualifiedNameRule else owner is not Rule


def test_every_rule_states_a_pre_pass_condition_or_is_listed_as_always_analysed():
    """A new rule gets a conscious choice: a condition of its own, or an entry in ALWAYS_ANALYSED."""
    unstated = [code for code in CODES if not _states_a_condition(RULES[code])]
    assert sorted(unstated) == sorted(ALWAYS_ANALYSED)


def _findings(function, source: str) -> list[dict]:
    style = FixStyle(EXAMPLE_LAYOUT)
    return [asdict(f) for f in function("example.py", SourceText(source), CODES, style)]


@pytest.mark.parametrize(("code", "index", "source"), SOURCES, ids=[f"{c}-{i}" for c, i, _ in SOURCES])
def test_fast_path_finds_what_the_full_path_finds(code, index, source):
    """All rules at once, so a rule dropped from a file cannot change what the others report there."""
    assert _findings(scan_file, source) == _findings(scan_text, source)


def test_words_in_comments_docstrings_and_messages_cost_no_libcst_parse(monkeypatch):
    source = (
        '"""Trains on cuda; see torch.cuda.synchronize."""\n'
        "# x = x.cuda()  torch.cuda.amp.autocast()\n"
        "print('move the model with .cuda() first')\n"
    )
    assert candidates(source, CODES) == ()
    monkeypatch.setattr(file_scan, "parse", lambda text: pytest.fail("libcst parsed the file"))
    assert scan_file("example.py", SourceText(source), CODES) == []


def test_code_the_rules_read_keeps_them():
    kept = candidates("import torch\nx = torch.ones(2, device='cuda:0')\ntorch.cuda.synchronize()\n", CODES)
    assert {"NM101", "NM401"} <= set(kept)


def test_a_prepass_failure_falls_back_to_the_full_analysis(monkeypatch):
    source = "import torch\ntorch.cuda.synchronize()\n"
    monkeypatch.setattr(file_scan, "candidates", lambda text, codes: 1 / 0)
    assert [f.code for f in scan_file("example.py", SourceText(source), CODES)] == ["NM401"]


def test_a_broken_file_the_pre_pass_clears_still_reports_that_it_cannot_be_parsed():
    source = "# moves the model to cuda\ndef f(:\n    pass\n"  # no rule can report: only the parser's verdict
    assert candidates(source, CODES) == ()
    found = _findings(scan_file, source)
    assert found == _findings(scan_text, source) and [f["code"] for f in found] == ["NM901"]


def test_code_ast_cannot_parse_gets_the_full_analysis():
    source = "type Alias = list[int]\ntorch.cuda.synchronize()\n"  # 3.12 syntax, which libcst reads
    assert _findings(scan_file, source) == _findings(scan_text, source)


def test_lexicon_reads_code_not_comments_and_every_string_value():
    lex = lexicon('a = "cu" "da"  # comment_word\nb = f"cuda:{rank}"\nc = r"x\\n"\nimport os.path as p\n')
    assert "comment_word" not in lex.names and {"a", "b", "rank", "os", "p"} <= lex.names
    assert {"cuda", "cu", "da", "cuda:{rank}", "cuda:", "x\\n"} <= lex.strings
    assert {"os", "path", "p"} <= lex.imported


def test_an_f_string_is_code_only_in_its_replacement_fields():
    lex = lexicon(
        'raise ValueError(f"{type(self).__name__} does not support `nn.DataParallel` {{with.braces}}")\n'
        "name = f\"{d['cuda:0'] if gpu else fallback!r:>{width}}\"\n"
    )
    assert {"type", "self", "__name__", "d", "gpu", "fallback", "width"} <= lex.names
    assert not {"DataParallel", "nn", "support", "with", "braces"} & lex.names
    assert "cuda:0" in lex.strings  # a string inside a field is a literal libcst sees
    message = 'import torch\nraise ValueError(f"{name} does not support `torch.nn.DataParallel`")\n'
    assert "NM305" not in candidates(message, CODES)
    assert "NM305" in candidates("import torch\nm = f'{torch.nn.DataParallel(m)}'\n", CODES)


def test_lexicon_chains_are_spelled_however_the_code_breaks_them():
    source = (
        "x = (torch  # see a.b\n  ).cuda . \\\n synchronize()\n"
        "y = b\ntorch.mps.empty_cache()\n"
        'z = f"{torch.xpu.device_count()} devices"  # comment.chain\n'
    )
    lex = lexicon(source)
    assert {
        "torch.cuda",
        "torch.cuda.synchronize",
        "torch.mps.empty_cache",
        "torch.xpu.device_count",
    } <= lex.chains
    assert (
        not {"b.torch", "see.a", "comment.chain"} & lex.chains
    )  # no chain across statements or from comments
    assert {
        "torch",
        "cuda",
        "synchronize",
        "x",
        "y",
        "b",
        "mps",
        "xpu",
    } <= lex.names and "see" not in lex.names


IMPORTS = """
import torch, os.path as osp
import torch.cuda as tc
from torch._inductor import (config as inductor_config,  # a comment, with a comma
    utils)
from torch.cuda import \\
    synchronize
from . import config
from .local import thing
from numpy import *
from importlib import import_module
inductor = import_module("torch._inductor")
cp, has_cp = optional_import("cupy")
def f():
    import torch.distributed.c10d as c10d
if True: import torch.xpu as txpu
x = 1; from torch.mps import synchronize as mps_sync
from_pretrained = model.import_weights  # words that begin with a keyword
"""


def test_lexicon_import_targets_are_what_the_qualified_name_resolver_binds():
    module = cst.parse_module(IMPORTS)
    imports = find(module, (cst.Import, cst.ImportFrom))
    resolved = {pair for node in imports for pair in import_bindings(node)}
    resolved |= {pair for node in find(module, cst.Assign) for pair in dynamic_import_bindings(node)}
    assert set(lexicon(IMPORTS).import_targets) == resolved
    assert ("inductor_config", "torch._inductor.config") in resolved and len(resolved) == 12
    assert {("import_module", "importlib.import_module"), ("cp", "cupy")} <= resolved


@pytest.mark.parametrize(
    ("source", "name", "expected"),
    [
        ("import torch.cuda as tc\ntc.synchronize()\n", "torch.cuda.synchronize", True),
        ("import torch.cuda as tc\ntc.Event()\nsynchronize = 1\n", "torch.cuda.synchronize", False),
        ("from torch.cuda import synchronize\n", "torch.cuda.synchronize", True),
        ("import torch\ntorch.cuda.synchronize()\n", "torch.cuda.synchronize", True),
        ("torch.cuda.synchronize()\n", "torch.cuda.synchronize", True),  # a notebook cell: no import
        (
            "from . import config\nimport torch\nconfig.max_autotune = True\n",
            "torch._inductor.config.*",
            False,
        ),
        (
            "from torch._inductor import config\nconfig.max_autotune = True\n",
            "torch._inductor.config.*",
            True,
        ),
        ("from torch._inductor.config import triton\n", "torch._inductor.config.*", True),
    ],
)
def test_references_follows_imports_and_chains(source, name, expected):
    assert references(lexicon(source), name) is expected


def test_lexicon_of_a_comment_banner_after_a_docstring_is_linear():
    """A `####` line right after a literal once made the regular expression backtrack exponentially
    (22 of them took 2.4 s)."""
    source = 'def f():\n    """Doc."""\n    ' + "#" * 22 + "\n    return 1\n"
    start = time.perf_counter()
    lexicon(source)
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize(
    ("source", "kept"),
    [
        # torch's zeros and a tensor made on the device, but no NumPy maker call: nothing NM801 could report
        (
            "import numpy as np\nimport torch\nx = torch.zeros(2)\ny = torch.tensor(np.stack(a), device=d)\n",
            False,
        ),
        (
            "import numpy as np\nimport torch\nids = np.array(batch['ids'])\n"
            "t = torch.tensor(ids, device=d)\n",
            False,
        ),
        ("import numpy as np\nimport torch\nx = torch.tensor(np.zeros(3), device=d)\n", True),
        ("import numpy\nimport torch\nx = torch.from_numpy(numpy.random.rand(3)).to(d)\n", True),
        ("import numpy.random as npr, numpy\nimport torch\nx = torch.from_numpy(npr.rand(3)).to(d)\n", True),
        ("import numpy as np\nimport torch\na = np.array([0.5, 1.5])\nt = torch.tensor(a, device=d)\n", True),
        ("from numpy import zeros\nimport torch\nx = torch.tensor(zeros(3), device=d)\n", True),
        # an explicit dtype, or an array of ints: not float64 arrays
        (
            "import numpy as np\nimport torch\nm = np.zeros((2, 3), dtype=bool)\n"
            "t = torch.tensor(m, device=d)\n",
            False,
        ),
        ("import numpy as np\nimport torch\nt = torch.tensor(np.array([1, 2]), device=d)\n", False),
        ("import numpy as np\nimport torch\nt = torch.tensor(np.array([1, 2.5]), device=d)\n", True),
        ("import numpy as np\nimport torch\nm = np.zeros(f(a, b))\nt = torch.tensor(m, device=d)\n", True),
        # strings and comments in the arguments are skipped whole: their parentheses and `dtype=` do not count
        (
            "import numpy as np\nimport torch\nm = np.full(3, ')', dtype=object)\n"
            "t = torch.tensor(m, device=d)\n",
            False,
        ),
        (
            "import numpy as np\nimport torch\nv = np.array(out['log(p)'][i], dtype=np.float32)\n"
            "t = torch.from_numpy(v).to(d)\n",
            False,
        ),
        (
            "import numpy as np\nimport torch\nm = np.full(3, 'dtype=f4')  # dtype=float32)\n"
            "t = torch.tensor(m, device=d)\n",
            True,
        ),
        ("import numpy as np\nimport torch\nm = np.zeros(3, # (\n)\nt = torch.tensor(m, device=d)\n", True),
        ("import numpy as np\nimport torch\nm = np.array([2.5, ')'])\nt = torch.tensor(m, device=d)\n", True),
        ("import os, numpy as np\nimport torch\nx = torch.tensor(np.ones(3), device=d)\n", True),
        ("import os, \\\n    numpy\nimport torch\nx = torch.tensor(numpy.ones(3), device=d)\n", True),
        ("def f(d):\n    import numpy as np\n    return torch.tensor(np.ones(3), device=d)\n", True),
    ],
)
def test_numpy_arrays_keep_nm801_only_when_a_numpy_maker_is_called(source, kept):
    assert ("NM801" in candidates(source, CODES)) is kept
    assert _findings(scan_file, source) == _findings(scan_text, source)


@pytest.mark.parametrize(
    ("source", "kept"),
    [
        ("loader = DataLoader(ds, pin_memory=args.pin_memory)\n", False),
        ("loader = DataLoader(ds, pin_memory=True)\n", True),
        ("loader = DataLoader(ds, pin_memory=(  # pinned\n    True))\n", True),
        ("x = x.pin_memory().to(device)\n", True),
        ("x = x.\\\n    pin_memory()\n", True),
    ],
)
def test_pin_memory_keeps_nm412_only_for_a_true_keyword_or_a_call(source, kept):
    assert ("NM412" in candidates(source, CODES)) is kept
    assert _findings(scan_file, source) == _findings(scan_text, source)


def test_conditions_that_read_the_text_take_linear_time_on_comment_banners():
    banner = "#" * 5000
    source = (
        "import numpy as np\nimport torch\n"
        f"x = torch.tensor(a, device=d).pin_memory  {banner}\nnp.  {banner}\n"
        f"  {banner}\npin_memory = {banner}\n"
    )
    start = time.perf_counter()
    candidates(source, CODES)
    assert time.perf_counter() - start < 5  # exponential backtracking would take hours


def test_a_dynamic_import_keeps_the_rules_of_the_module_it_names():
    """torch's `after_dynamo.py`: `inductor_config = import_module("torch._inductor.config")`, then
    `inductor_config.is_fbcode()`. The full analysis reports NM503 there; the pre-pass must keep NM503
    although `_inductor` is only spelled in a string."""
    source = (
        "from importlib import import_module\n\n"
        'inductor_config = import_module("torch._inductor.config")\nuse_buck = inductor_config.is_fbcode()\n'
    )
    assert "NM503" in candidates(source, ("NM503",))
    assert [f.code for f in scan_text("a.py", SourceText(source), ("NM503",))] == ["NM503"]
