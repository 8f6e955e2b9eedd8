"""NM601: CUDA environment variables (`CUDA_VISIBLE_DEVICES`, ...) read or set by the program."""

from __future__ import annotations

from typing import ClassVar

from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.rule import Invalid
from neuron_migrate.migrate.rules.env_var_uses import EnvVarRule

_NO_EQUIVALENT = "it has no Neuron equivalent: set it only for CUDA runs"
_TOOLKIT = "there is no CUDA toolkit on Trainium: make the code that needs it CUDA-only"


class CudaEnvVar(EnvVarRule):
    """A CUDA environment variable read or set by the program.

    What it does
    Flags `CUDA_VISIBLE_DEVICES`, `CUDA_LAUNCH_BLOCKING`, `PYTORCH_CUDA_ALLOC_CONF`, `CUDA_HOME`, `CUDA_PATH`
    and a few other CUDA runtime variables where the code uses them as environment variable names
    (`os.environ[...]`, `.get`, `.setdefault`, `os.getenv`, `"X" in os.environ`, `env=` dicts of subprocesses).

    Why it matters on Trainium
    The Neuron runtime ignores them. `CUDA_VISIBLE_DEVICES` does not restrict which NeuronCores a process
    sees: `NEURON_RT_VISIBLE_CORES` does, and it counts logical NeuronCores (several per chip), so the values
    differ. `CUDA_LAUNCH_BLOCKING=1` corresponds to `NEURON_LAUNCH_BLOCKING=1`.

    Example
    os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)

    Use instead
    os.environ["NEURON_RT_VISIBLE_CORES"] = str(local_rank)  # a NeuronCore index, not a GPU index

    Fix safety
    No automatic fix: the Neuron variables take different values, and some CUDA variables have no equivalent.
    """  # noqa: E501 - rendered verbatim into docs/rules.md

    code = "NM601"
    cuda_only = False  # setting it is harmless where CUDA is missing
    cuda_setting = True
    name = "cuda-env-var"
    message = "`{var}` is CUDA-only: {advice}"
    severity = "warning"
    triggers = (b"CUDA_",)
    ADVICE: ClassVar[dict[str, str]] = {
        "CUDA_VISIBLE_DEVICES": "select NeuronCores with `NEURON_RT_VISIBLE_CORES` (core indices or a range "
        "such as `0-3`; cores, not GPUs)",
        "CUDA_LAUNCH_BLOCKING": "use `NEURON_LAUNCH_BLOCKING=1` for synchronous execution while debugging",
        "PYTORCH_CUDA_ALLOC_CONF": "it tunes the CUDA caching allocator only; " + _NO_EQUIVALENT,
        "PYTORCH_NO_CUDA_MEMORY_CACHING": _NO_EQUIVALENT,
        "CUDA_HOME": _TOOLKIT,
        "CUDA_PATH": _TOOLKIT,
        "TORCH_CUDA_ARCH_LIST": "it picks GPU architectures for CUDA extension builds: make the build "
        "CUDA-only",
        "CUDA_DEVICE_ORDER": "select NeuronCores with `NEURON_RT_VISIBLE_CORES`",
        "CUDA_DEVICE_MAX_CONNECTIONS": _NO_EQUIVALENT,
        "CUDA_MODULE_LOADING": _NO_EQUIVALENT,
    }
    VALID = (
        'import os\nos.environ["NEURON_RT_VISIBLE_CORES"] = "0-3"\n',
        'import logging\nlogging.info("set CUDA_VISIBLE_DEVICES to pick a GPU")\n',
        '"""Set CUDA_VISIBLE_DEVICES before running."""\n# CUDA_LAUNCH_BLOCKING=1 helps debugging\n',
        'config = {"name": "CUDA_VISIBLE_DEVICES"}\nprint(config["name"])\n',
        'import os\nx = os.environ.get("HOME", "CUDA_HOME")\n',
    )
    INVALID = (
        Invalid(
            'import os\nos.environ["CUDA_VISIBLE_DEVICES"] = str(rank)\n',
        ),
        Invalid(
            'from os import environ, getenv\nenviron.setdefault("CUDA_VISIBLE_DEVICES", "0")\n'
            'home = getenv("CUDA_HOME") or environ.get("CUDA_PATH")\n',
            count=3,
        ),
        Invalid(
            'import os\nif "CUDA_LAUNCH_BLOCKING" not in os.environ:\n'
            '    os.putenv("CUDA_LAUNCH_BLOCKING", "1")\n',
            count=2,
        ),
        Invalid(
            "import os, subprocess\ndef launch(cmd):\n    env = os.environ.copy()\n"
            '    env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"\n'
            '    subprocess.run(cmd, env={**env, "CUDA_VISIBLE_DEVICES": "1"})\n',
            count=2,
        ),
        Invalid(
            'import os, subprocess\nextra = {"CUDA_VISIBLE_DEVICES": "0,1"}\n'
            'subprocess.Popen(["python", "train.py"], env=extra)\n',
        ),
        Invalid(
            'import os\nos.environ.update({"CUDA_VISIBLE_DEVICES": "0"}, CUDA_LAUNCH_BLOCKING="1")\n',
            count=2,
        ),
        Invalid(
            'def test_cpu(monkeypatch):\n    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")\n',
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """One of the variables in ADVICE, as a string or a keyword (`os.environ.update(CUDA_HOME=...)`)."""
        return not lex.strings.isdisjoint(cls.ADVICE) or not lex.names.isdisjoint(cls.ADVICE)

    def advice(self, var: str) -> str | None:
        return self.ADVICE.get(var)
