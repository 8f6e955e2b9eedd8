"""Which architectures a fleet run covers: tasks, their transformers auto mappings, and `--models` resolution.

`TASKS` maps a task name to the `modeling_auto` mapping that lists its architectures and the Auto class that
builds them. The mappings are read in the fork server (importing them imports torch); the parent only sees the
resulting `Architecture` list (cached per transformers version by `fleet.cache`).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from neuron_migrate.errors import UsageError

# task -> (modeling_auto mapping of model_type -> class name, Auto class that builds it). Order matters: a
# model named with --models that is not in the requested task's mapping gets the first task here that lists
# it.
TASKS: dict[str, tuple[str, str]] = {
    "causal-lm": ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoModelForCausalLM"),
    "seq2seq": ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "AutoModelForSeq2SeqLM"),
    "masked-lm": ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "AutoModelForMaskedLM"),
    "image-classification": (
        "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
        "AutoModelForImageClassification",
    ),
    "speech-seq2seq": ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "AutoModelForSpeechSeq2Seq"),
    "ctc": ("MODEL_FOR_CTC_MAPPING_NAMES", "AutoModelForCTC"),
}
DIFFUSERS = (
    "diffusers"  # `fleet diffusers`: model classes of diffusers (fleet.diffusers_models), not transformers
)


@dataclass(frozen=True)
class Architecture:
    """One thing to trace: a model type, the task it is traced for, and the class transformers builds for
    it."""

    model_type: str
    task: str
    architecture: str  # e.g. LlamaForCausalLM


def check_task(task: str) -> None:
    """Reject an unknown --task with the list of known ones."""
    if task not in TASKS and task != DIFFUSERS:
        raise UsageError(f"--task {task}: use one of {', '.join(TASKS)}")


def parse_models(text: str | None) -> tuple[str, ...]:
    """`llama, gpt2,,t5` -> ("llama", "gpt2", "t5"), keeping order and dropping repeats."""
    seen: dict[str, None] = {}
    for name in (part.strip() for part in (text or "").split(",")):
        if name:
            seen.setdefault(name, None)
    return tuple(seen)


def read_mappings() -> dict[str, dict[str, str]]:
    """task -> {model_type: class name}, from the installed transformers (imports it, and so torch), and the
    Diffusers model classes when diffusers is installed."""
    from transformers.models.auto import modeling_auto

    from neuron_migrate.fleet.diffusers_models import available

    mappings = {}
    for task, (attr, _) in TASKS.items():
        names: Any = getattr(modeling_auto, attr, {})
        mappings[task] = {mt: cls if isinstance(cls, str) else cls[0] for mt, cls in names.items()}
    mappings[DIFFUSERS] = available()
    return mappings


def select(mappings: dict[str, dict[str, str]], task: str, models: tuple[str, ...]) -> list[Architecture]:
    """Every architecture of `task`, or the named `models`, each traced for `task` when it has one and else
    for the first task that lists it (so `--models llama,t5` traces t5 as seq2seq). Unknown names:
    UsageError."""
    check_task(task)
    if task == DIFFUSERS and not mappings.get(DIFFUSERS):
        raise UsageError("fleet diffusers needs diffusers: pip install 'neuron-migrate[diffusers]'")
    if not models:
        return [Architecture(mt, task, cls) for mt, cls in sorted(mappings[task].items())]
    chosen = []
    for name in models:
        order = [task] if task == DIFFUSERS else [task, *(t for t in TASKS if t != task)]
        hit = next((t for t in order if name in mappings.get(t, {})), None)
        if hit is None:
            known = sorted({mt for mapping in mappings.values() for mt in mapping})
            close = difflib.get_close_matches(name, known, n=3)
            hint = f"did you mean {', '.join(close)}?" if close else "see `neuron-migrate fleet hf --list`"
            raise UsageError(
                f"--models {name}: transformers has no model of that type for any fleet task "
                f"({', '.join(TASKS)}); {hint}"
            )
        chosen.append(Architecture(name, hit, mappings[hit][name]))
    return chosen
