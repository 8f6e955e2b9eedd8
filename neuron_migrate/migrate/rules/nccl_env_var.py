"""NM602: NCCL environment variables (`NCCL_*`, `TORCH_NCCL_*`) read or set by the program."""

from __future__ import annotations

from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.rule import Invalid
from neuron_migrate.migrate.rules.env_var_uses import EnvVarRule


class NcclEnvVar(EnvVarRule):
    """An NCCL environment variable read or set by the program.

    What it does
    Flags `NCCL_*` and `TORCH_NCCL_*` names (`NCCL_DEBUG`, `NCCL_SOCKET_IFNAME`, `TORCH_NCCL_BLOCKING_WAIT`, …)
    where the code uses them as environment variable names.

    Why it matters on Trainium
    Trainium collectives do not go through NCCL, so these settings do nothing there, and debugging or
    network tuning that relied on them silently stops working.

    Example
    os.environ["NCCL_DEBUG"] = "INFO"

    Use instead
    os.environ["NEURON_RT_LOG_LEVEL"] = "INFO"  # runtime logs; see the Neuron runtime variable reference

    Fix safety
    No automatic fix: Neuron's runtime and collectives variables are not one-for-one replacements.
    """  # noqa: E501 - rendered verbatim into docs/rules.md

    code = "NM602"
    cuda_only = False  # setting it is harmless where CUDA is missing
    cuda_setting = True
    name = "nccl-env-var"
    message = "`{var}` configures NCCL, which Trainium does not use: {advice}"
    severity = "warning"
    triggers = (b"NCCL_",)
    VALID = (
        'import os\nos.environ["NEURON_RT_LOG_LEVEL"] = "INFO"\n',
        'print("export NCCL_DEBUG=INFO to debug hangs")\n',
        'parser.add_argument("--nccl-debug", help="value for NCCL_DEBUG")\n',
    )
    INVALID = (
        Invalid(
            'import os\nos.environ["NCCL_DEBUG"] = "INFO"\nlevel = os.getenv("NCCL_DEBUG_SUBSYS")\n',
            count=2,
        ),
        Invalid(
            'import os as system\nif "TORCH_NCCL_ASYNC_ERROR_HANDLING" in system.environ:\n    pass\n',
        ),
        Invalid(
            'import os, subprocess\nsubprocess.run(cmd, env=dict(os.environ, NCCL_P2P_DISABLE="1"))\n',
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """An NCCL variable, as a string or a keyword."""
        return any(v.startswith(("NCCL_", "TORCH_NCCL_")) for v in (*lex.strings, *lex.names))

    def advice(self, var: str) -> str | None:
        if not var.startswith(("NCCL_", "TORCH_NCCL_")):
            return None
        if var in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS"):
            return "set it only for CUDA runs; for Neuron runtime logs set `NEURON_RT_LOG_LEVEL`"
        return "set it only for CUDA runs (Neuron collectives have their own runtime variables)"
