"""`neuron-migrate fleet hf`: trace a tiny instance of every transformers architecture of a task on `neuron`
and report which run natively, with CPU fallbacks, or fail, and which missing ops block the most. See
docs/fleet.md."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from neuron_migrate.commands.common import HelpGroup, stderr_console
from neuron_migrate.errors import UsageError
from neuron_migrate.options import DEFAULT_CACHE_DIR

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_CACHE = DEFAULT_CACHE_DIR
fleet_app = typer.Typer(
    cls=HelpGroup,
    no_args_is_help=True,
    help="Trace whole fleets of models on `neuron` and rank what blocks them.",
)


def register(app: typer.Typer) -> None:
    """Add the `fleet` command group to the app."""
    app.add_typer(fleet_app, name="fleet")


def _mode(mode: str | None, inference: bool | None) -> str:
    if mode is not None and inference is not None:
        raise UsageError("give either --mode or --inference/--train, not both")
    return mode or ("inference" if inference else "train")


def _outputs(output_format: str, output: Path | None, output_dir: Path | None) -> None:
    """Check the output flags; create --output-dir when it is missing."""
    from neuron_migrate.reports.fleet import FORMATS

    if output_format not in FORMATS:
        raise UsageError(f"--format {output_format}: use one of {', '.join(FORMATS)}")
    if output is not None and output_format == "text":
        raise UsageError("--output needs --format json, md or html (the text summary goes to stderr)")
    if output_dir is not None:
        if output_dir.exists() and not output_dir.is_dir():
            raise UsageError(f"--output-dir {output_dir}: exists and is not a folder; give a folder")
        try:
            output_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UsageError(f"--output-dir {output_dir}: cannot create it ({err.strerror})") from None


def write_result(
    result, console: Console, output_format: str, output: Path | None, output_dir: Path | None, top: int
) -> None:
    """Write the pages and the --format output, then the text summary on stderr."""
    from neuron_migrate.reports.fleet import render
    from neuron_migrate.reports.fleet_text import render_summary
    from neuron_migrate.reports.output import write_output

    if output_dir is not None:
        for fmt, name in (("json", "fleet.json"), ("md", "fleet.md"), ("html", "fleet.html")):
            write_output(render(result, fmt), output_dir / name, "--output-dir")
    if output_format != "text":
        write_output(render(result, output_format), output)
    render_summary(result, console, top)


@fleet_app.command("hf")
def hf_command(
    task: str = typer.Option(
        "causal-lm",
        "--task",
        help="causal-lm, seq2seq, masked-lm, image-classification, speech-seq2seq or ctc",
    ),
    models: str | None = typer.Option(
        None,
        "--models",
        help="only these model types, a,b,...; each is traced "
        "for --task if it has it, else for the first task that lists it",
    ),
    mode: str | None = typer.Option(
        None,
        "--mode",
        help="train (forward + backward + AdamW step, the default), "
        "inference (forward only) or both, side by side",
    ),
    inference: bool | None = typer.Option(
        None, "--inference/--train", help="same as --mode inference / train"
    ),
    jobs: int = typer.Option(
        max(1, os.cpu_count() or 1), "--jobs", "-j", help="architectures traced at once"
    ),
    timeout: float = typer.Option(
        180.0, "--timeout", help="seconds before one architecture's process is killed"
    ),
    max_memory: int = typer.Option(
        4096, "--max-memory", help="resident-memory bound of each architecture's process, in MB (0: none)"
    ),
    device: str = typer.Option(
        "neuron", "--device", help="neuron (real torch-neuronx if present, else the stand-in) or stand-in"
    ),
    opdb: str | None = typer.Option(
        None, "--opdb", help="opdb snapshot version or .json path (default newest)"
    ),
    shard: str | None = typer.Option(
        None,
        "--shard",
        help="I/N: trace only the I-th of N slices (combine the slices' fleet.json with `fleet merge`)",
    ),
    backend: str = typer.Option(
        "local", "--backend", help="local (this machine) or ray (a Ray cluster; needs neuron-migrate[ray])"
    ),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="Ray cluster to join (default: RAY_ADDRESS, else a local Ray instance)"
    ),
    cache_dir: Path = typer.Option(DEFAULT_CACHE, "--cache-dir", help="where results are cached"),
    no_cache: bool = typer.Option(False, "--no-cache", help="neither read nor write the cache"),
    refresh: bool = typer.Option(False, "--refresh", help="re-trace everything, then update the cache"),
    output_format: str = typer.Option("text", "--format", help="text (summary on stderr), json, md or html"),
    output: Path | None = typer.Option(None, "--output", "-o", help="write the --format output to this file"),
    output_dir: Path | None = typer.Option(
        None,
        "--output-dir",
        help="write fleet.json, fleet.md and fleet.html into this folder (created when missing)",
    ),
    list_only: bool = typer.Option(
        False, "--list", help="list the architectures the run would trace, and stop"
    ),
    top: int = typer.Option(10, "--top", help="how many ranked ops the text summary shows"),
) -> None:
    """Trace every architecture of a task (or --models) and report verdicts, the op matrix and the ranking."""
    _fleet(**locals())


def _fleet(
    task: str,
    models: str | None,
    mode: str | None,
    inference: bool | None,
    jobs: int,
    timeout: float,
    max_memory: int,
    device: str,
    opdb: str | None,
    shard: str | None,
    backend: str,
    ray_address: str | None,
    cache_dir: Path,
    no_cache: bool,
    refresh: bool,
    output_format: str,
    output: Path | None,
    output_dir: Path | None,
    list_only: bool,
    top: int,
) -> None:
    """What `fleet hf` and `fleet diffusers` share: options, the run, the outputs."""
    from neuron_migrate.fleet.enumerate import parse_models
    from neuron_migrate.fleet.matrix import build_result
    from neuron_migrate.fleet.options import FleetOptions, parse_shard

    _outputs(output_format, output, output_dir)
    options = FleetOptions(
        task=task,
        models=parse_models(models),
        mode=_mode(mode, inference),
        jobs=jobs,
        timeout=timeout,
        max_memory_mb=max_memory or None,
        device=device,
        opdb=opdb,
        cache_dir=None if no_cache else cache_dir,
        refresh=refresh,
        list_only=list_only,
        shard=parse_shard(shard),
        backend=backend,
        ray_address=ray_address,
    )
    options.check()
    console = stderr_console()
    run = _run_with_progress(options, console)
    if list_only:
        for arch in run.architectures:
            typer.echo(f"{arch.model_type}\t{arch.task}\t{arch.architecture}")
        return
    result = build_result(run, task, options.modes, device)
    write_result(result, console, output_format, output, output_dir, top)


@fleet_app.command("diffusers")
def diffusers_command(
    models: str | None = typer.Option(
        None, "--models", help="only these model classes, e.g. UNet2DConditionModel,AutoencoderKL"
    ),
    mode: str | None = typer.Option(
        None,
        "--mode",
        help="train (a denoising / reconstruction step with "
        "backward and AdamW, the default), inference (one forward) or both",
    ),
    inference: bool | None = typer.Option(
        None, "--inference/--train", help="same as --mode inference / train"
    ),
    jobs: int = typer.Option(max(1, os.cpu_count() or 1), "--jobs", "-j", help="models traced at once"),
    timeout: float = typer.Option(180.0, "--timeout", help="seconds before one model's process is killed"),
    max_memory: int = typer.Option(
        4096, "--max-memory", help="resident-memory bound per process, MB (0: none)"
    ),
    device: str = typer.Option("neuron", "--device", help="neuron or stand-in"),
    opdb: str | None = typer.Option(
        None, "--opdb", help="opdb snapshot version or .json path (default newest)"
    ),
    shard: str | None = typer.Option(None, "--shard", help="I/N: trace only the I-th of N slices"),
    backend: str = typer.Option("local", "--backend", help="local or ray"),
    ray_address: str | None = typer.Option(None, "--ray-address", help="Ray cluster to join"),
    cache_dir: Path = typer.Option(DEFAULT_CACHE, "--cache-dir", help="where results are cached"),
    no_cache: bool = typer.Option(False, "--no-cache", help="neither read nor write the cache"),
    refresh: bool = typer.Option(False, "--refresh", help="re-trace everything, then update the cache"),
    output_format: str = typer.Option("text", "--format", help="text (summary on stderr), json, md or html"),
    output: Path | None = typer.Option(None, "--output", "-o", help="write the --format output to this file"),
    output_dir: Path | None = typer.Option(
        None,
        "--output-dir",
        help="write fleet.json, fleet.md and fleet.html into this folder (created when missing)",
    ),
    list_only: bool = typer.Option(False, "--list", help="list the models the run would trace, and stop"),
    top: int = typer.Option(10, "--top", help="how many ranked ops the text summary shows"),
) -> None:
    """Trace tiny random-weight Diffusers UNets, DiT-style transformers and VAEs on `neuron`: a denoising
    training step (or one inference step) each."""
    _fleet(task="diffusers", **locals())


@fleet_app.command("merge")
def merge_command(
    results: list[Path] = typer.Argument(..., help="the fleet.json of every shard (`fleet hf --shard I/N`)"),
    output_format: str = typer.Option("text", "--format", help="text (summary on stderr), json, md or html"),
    output: Path | None = typer.Option(None, "--output", "-o", help="write the --format output to this file"),
    output_dir: Path | None = typer.Option(
        None,
        "--output-dir",
        help="write fleet.json, fleet.md and fleet.html into this folder (created when missing)",
    ),
    top: int = typer.Option(10, "--top", help="how many ranked ops the text summary shows"),
) -> None:
    """Combine the results of `fleet hf --shard I/N` runs into the report one run would give."""
    from neuron_migrate.fleet.merge import merge

    _outputs(output_format, output, output_dir)
    write_result(merge(list(results)), stderr_console(), output_format, output, output_dir, top)


def _run_with_progress(options, console: Console):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from neuron_migrate.fleet.runner import run_fleet

    if not console.is_terminal:
        return run_fleet(options)
    columns = (
        TextColumn("[bold]fleet[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        bar = progress.add_task("starting (importing torch + transformers) …", total=None)

        def plan(archs) -> None:
            progress.update(bar, total=len(archs), description=f"{options.task} ({options.mode})")

        def done(record) -> None:
            progress.update(bar, advance=1, description=f"{record['model_type']}: {record.get('outcome')}")

        return run_fleet(options, on_record=done, on_plan=plan)
