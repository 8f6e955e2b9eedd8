"""The pre-pass: of the rules a file's bytes trigger, which can report anything in it, decided before libcst.

The byte triggers (`Rule.triggers`) are deliberately loose: `accelerator`, `cuda`, `autocast` occur in
comments, docstrings, log messages and in code no rule flags, and most files that pass them have no
finding at all, yet each costs a libcst parse (about ten times `ast.parse`) and a walk. Here every rule has
a *necessary condition* on what the file's code spells (`lexicon.py`): the identifiers a qualified name
needs (every component of `torch.cuda.synchronize` is an identifier somewhere in a file that uses it, in
the chain or in the import that bound its head), the string values a device-string rule needs (`"cuda"`,
`"cuda:0"`, `f"cuda:{i}"`), the modules an import must name. A rule whose condition fails cannot report,
so it is left out of the file's analysis, and a file left with no rule is not parsed by libcst at all.

The conditions read the rules' own tables (NAMES, the rules' module constants), so a new name in a table is
covered at once. A rule whose logic changes must have its condition here reviewed: a rule with no entry is
always analysed, and `benchmarks/scan.py --differential` compares this path with the full one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import lru_cache

from neuron_migrate.migrate.lexicon import Lexicon, lexicon

#: rules whose findings all come from references to their NAMES (QualifiedNameRule.use): the extra visitors
#: some of them have only gather facts for those findings
_NAMES_ONLY = (
    "NM106",
    "NM107",
    "NM108",
    "NM110",
    "NM201",
    "NM202",
    "NM203",
    "NM302",
    "NM303",
    "NM401",
    "NM402",
    "NM403",
    "NM404",
    "NM405",
    "NM406",
    "NM407",
    "NM408",
    "NM409",
    "NM410",
    "NM411",
    "NM702",
)
#: what `is_cuda_string` accepts, as a value: 'cuda', 'cuda:1', the text 'cuda:' of f"cuda:{i}" and of
#: "cuda:" + str(i), "cuda:{}".format(i), "cuda:%d" % i
_CUDA_STRING = re.compile(r"^cuda(?::\d*|:\{\w*\}|:%[di])?$")

Condition = Callable[[Lexicon], bool]

#: what may stand between two tokens of one expression: blanks, line continuations, comments (a comment
#: runs to its line's end: were it allowed to stop earlier, a `####` line would split in exponentially many
#: ways)
_BETWEEN = r"(?:\s|\\|#[^\r\n]*(?![^\r\n]))*"
#: `pin_memory=True` (the keyword NM412 reports) or a `.pin_memory(` call; comments and strings may match too,
#: which only keeps a file that cannot report (never the reverse)
_PINNED = re.compile(
    rf"\bpin_memory{_BETWEEN}={_BETWEEN}(?:\({_BETWEEN})*True\b|\.{_BETWEEN}pin_memory{_BETWEEN}\("
)
#: an `import a, b as c` statement's list of modules (continuation lines joined)
_IMPORT_LIST = re.compile(r"\bimport\s+((?:[^\r\n;#\\]|\\\r?\n)+)")
_NUMPY_MODULE = re.compile(r"numpy(?:\s*\.\s*\w+)*(?:\s+as\s+(\w+))?")


def _numpy_aliases(text: str) -> set[str]:
    """The names imports bind to NumPy or one of its modules (`import numpy as np`, `import os, numpy`)."""
    aliases = set()
    for modules in _IMPORT_LIST.findall(text):
        for module in modules.replace("\\", " ").split(","):
            found = _NUMPY_MODULE.fullmatch(module.strip())
            if found:
                aliases.add(found.group(1) or "numpy")
    return aliases


def candidates(text: str, codes: Iterable[str]) -> tuple[str, ...]:
    """The rules among `codes` that can report something in Python source `text`."""
    lex = lexicon(text)
    table = conditions()
    return tuple(code for code in codes if code not in table or table[code](lex))


def spelled(qualified: Iterable[str]) -> tuple[frozenset[str], ...]:
    """Per qualified name (`torch.cuda.*` for a namespace), the identifiers a reference to it spells."""
    return tuple(frozenset(part for part in name.split(".") if part != "*") for name in qualified)


def _uses(*tables: Iterable[str]) -> Callable[[Lexicon], bool]:
    needed = spelled(name for table in tables for name in table)
    return lambda lex: any(parts <= lex.names for parts in needed)


def _cuda_string(lex: Lexicon) -> bool:
    return any(value.startswith("cuda") and _CUDA_STRING.match(value) for value in lex.strings)


def _any_string(lex: Lexicon, test: Callable[[str], bool]) -> bool:
    return any(test(value) for value in lex.strings)


@lru_cache(maxsize=1)
def conditions() -> dict[str, Condition]:
    """Rule code -> necessary condition for a finding of that rule (codes not listed: always analysed)."""
    from neuron_migrate.migrate.rule import load_rules
    from neuron_migrate.migrate.rules import (
        amp_device,
        compile_options,
        distributed,
        environment,
        extensions,
        libraries,
        lightning,
        numerics,
        tensor_types,
    )

    rules = load_rules()
    table: dict[str, Condition] = {code: _uses(rules[code].NAMES) for code in _NAMES_ONLY if code in rules}
    table["NM704"] = _uses(extensions._TRITON_DECORATORS)
    table["NM101"] = _cuda_string
    table["NM102"] = lambda lex: {"torch", "device"} <= lex.names and _cuda_string(lex)
    table["NM103"] = lambda lex: "cuda" in lex.names
    table["NM104"] = lambda lex: "is_cuda" in lex.names
    table["NM105"] = _cuda_string
    table["NM109"] = _or(
        _uses(rules["NM109"].NAMES), lambda lex: _any_string(lex, lambda s: tensor_types._kind(s) is not None)
    )
    entry_points = _uses(lightning._ENTRY_POINTS)
    table["NM111"] = _or(
        _uses(rules["NM111"].NAMES),
        lambda lex: (
            "accelerator" in lex.names
            and entry_points(lex)
            and _any_string(lex, lambda s: s.lower() in lightning._CUDA_NAMES)
        ),
    )
    autocast = _uses(amp_device._AUTOCAST, amp_device._CUSTOM)
    table["NM204"] = lambda lex: "cuda" in lex.strings and autocast(lex)
    table["NM205"] = _uses(amp_device._SCALER)
    backend_call = _uses(distributed._BACKEND_POSITION)
    nccl_constant = _uses((distributed._NCCL_CONSTANT,))
    table["NM301"] = lambda lex: (
        backend_call(lex) and (nccl_constant(lex) or _any_string(lex, lambda s: "nccl" in s.lower()))
    )
    backends = rules["NM304"].BACKENDS
    table["NM304"] = lambda lex: "cuda" in lex.strings and _any_string(lex, lambda s: s.lower() in backends)
    table["NM412"] = lambda lex: "pin_memory" in lex.names and _PINNED.search(lex.text) is not None
    modes = frozenset(compile_options._MODES)
    table["NM501"] = lambda lex: (
        {"mode", "compile"} <= lex.names
        and (not modes.isdisjoint(lex.strings) or ("torch" in lex.names and bool(lex.strings - {"default"})))
    )
    table["NM502"] = lambda lex: {"dynamic", "True", "compile"} <= lex.names
    table["NM503"] = _or(
        _uses(rules["NM503"].NAMES),
        lambda lex: {"options", "compile"} <= lex.names and _any_string(lex, compile_options._is_cuda_key),
    )
    advice = frozenset(rules["NM601"].ADVICE)
    table["NM601"] = lambda lex: not advice.isdisjoint(lex.strings) or not advice.isdisjoint(lex.names)
    table["NM602"] = lambda lex: any(
        v.startswith(("NCCL_", "TORCH_NCCL_")) for v in (*lex.strings, *lex.names)
    )
    launchers = _uses(environment._LAUNCHERS)
    table["NM603"] = lambda lex: (
        launchers(lex) and _any_string(lex, lambda s: bool(environment._NVIDIA_SMI.search(s)))
    )
    # an import of a library is an import statement naming every component of its key (`deepspeed.ops`: `from
    # deepspeed import ops`, `import deepspeed.ops.adam`); `import deepspeed` alone is not one
    imports = spelled(libraries.LIBRARIES)
    table["NM701"] = lambda lex: (
        any(parts <= lex.imported for parts in imports)
        or (
            bool({"import_module", "__import__"} & lex.names)
            and _any_string(lex, lambda s: libraries.library_of(s) is not None)
        )
    )
    table["NM801"] = _dtype_condition(rules["NM801"], _numpy_float64_to_device(numerics._NUMPY_FLOAT64))
    table["NM802"] = _dtype_condition(
        rules["NM802"], lambda lex: {"stft", "return_complex", "True"} <= lex.names
    )
    return table


def _numpy_float64_to_device(float64_makers: Iterable[str]) -> Condition:
    """NM801's array check: a call of a NumPy function that makes float64 arrays (`np.zeros(...)`, ...), or
    `np.array` / `np.asarray` of a literal list or tuple (the rule looks for float literals in it), and
    `torch.from_numpy`, or `torch.tensor` / `torch.as_tensor` with `device=`.

    `zeros`, `ones`, `full` are torch's names too, so the call must be spelled on a NumPy alias that an import
    binds (`np.zeros`, `numpy.random.rand`); a file that imports names from NumPy directly (`from numpy import
    zeros`) keeps the looser test."""
    makers = {name.rsplit(".", 1)[1] for name in float64_makers}
    call = rf"(?:{'|'.join(sorted(makers))})\b|(?:array|asarray){_BETWEEN}\({_BETWEEN}[\[(]"

    def holds(lex: Lexicon) -> bool:
        if "numpy" not in lex.imported or (makers | {"array", "asarray"}).isdisjoint(lex.names):
            return False
        to_device = "device" in lex.names and bool({"tensor", "as_tensor"} & lex.names)
        if not ("from_numpy" in lex.names or to_device):
            return False
        if re.search(r"\bfrom\s+numpy\b", lex.text):
            return True
        aliases = _numpy_aliases(lex.text)
        if not aliases:
            return False
        spelled = rf"\b(?:{'|'.join(map(re.escape, aliases))}){_BETWEEN}\.(?:{_BETWEEN}random{_BETWEEN}\.)?"
        return re.search(rf"{spelled}{_BETWEEN}(?:{call})", lex.text) is not None

    return holds


def _or(*tests: Condition) -> Condition:
    return lambda lex: any(test(lex) for test in tests)


def _dtype_condition(rule, extra: Condition) -> Condition:
    """A `_DtypeRule`: a use of its NAMES, a call of one of its METHODS, a dtype string passed as `dtype=` /
    `torch_dtype=`, or what the rule's own extra check needs."""
    methods = frozenset(rule.METHODS)
    dtype_strings = frozenset(rule.DTYPE_STRINGS)
    return _or(
        _uses(rule.NAMES),
        lambda lex: not methods.isdisjoint(lex.names),
        lambda lex: bool({"dtype", "torch_dtype"} & lex.names) and not dtype_strings.isdisjoint(lex.strings),
        extra,
    )
