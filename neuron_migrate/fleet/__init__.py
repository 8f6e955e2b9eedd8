"""`neuron-migrate fleet hf`: trace a tiny random-weight instance of every architecture `transformers` knows
for a task on the `neuron` device, and report which run natively, which need CPU fallbacks, which fail, and
which missing ops would unblock the most architectures.

- `enumerate` — the tasks, their auto mappings, and which architectures `--models` names;
- `server`, `worker` — the fork server that imports torch + transformers once and forks one child per
  architecture (the device is registered inside each child, after the fork);
- `runner` — the parent side: cache, server, timeouts, progress; returns one `ArchResult` per architecture;
- `matrix` — verdicts, the architecture x op matrix, the op ranking and the native share;

and `neuron_migrate.reports.fleet` renders it as JSON, Markdown and self-contained HTML.
"""
