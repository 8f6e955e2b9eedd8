"""Scaling out gives the same answer: a local run, the merge of `--shard 1/2` and `--shard 2/2`, and a
`--backend ray` run on a local Ray instance this test starts, each traced cold from its own cache, produce the
same fleet JSON (times, cache counters and the generation stamp aside)."""

from __future__ import annotations

import json

import pytest

from neuron_migrate.fleet.matrix import build_result
from neuron_migrate.fleet.merge import merge
from neuron_migrate.fleet.options import FleetOptions
from neuron_migrate.fleet.runner import run_fleet
from neuron_migrate.reports.fleet import render

pytestmark = pytest.mark.xdist_group("fleet-scale-out")
# three that run and one that does not build here (gemma3n's vision tower needs timm, which is not installed)
MODELS = ("llama", "gpt2", "qwen2", "gemma3n")


def _result(cache, **options) -> str:
    opts = FleetOptions(models=MODELS, mode="inference", jobs=2, timeout=300, cache_dir=cache, **options)
    return render(build_result(run_fleet(opts), opts.task, opts.modes, opts.device), "json")


def _stable(text: str) -> dict:
    data = json.loads(text)
    for key in ("generated", "traced", "from_cache", "shard"):
        data.pop(key)
    for arch in data["architectures"]:
        arch.pop("seconds")
        arch.pop("cached")
    return data


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    return _result(tmp_path_factory.mktemp("local"))


def test_merged_shards_are_the_local_run(local, tmp_path):
    paths = []
    for index in (1, 2):
        text = _result(tmp_path / f"cache{index}", shard=(index, 2))
        assert json.loads(text)["shard"] == f"{index}/2"
        paths.append(tmp_path / f"shard{index}.json")
        paths[-1].write_text(text)
    merged = render(merge(paths), "json")
    assert _stable(merged) == _stable(local)
    verdicts = {a["model_type"]: a["verdict"] for a in json.loads(local)["architectures"]}
    assert verdicts["gemma3n"] == "does_not_build" and verdicts["llama"] in ("native", "fallbacks")


def test_ray_backend_is_the_local_run(local, tmp_path):
    ray = pytest.importorskip(
        "ray", reason="the ray extra is not installed (pip install 'neuron-migrate[ray]')"
    )
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert int(ray.cluster_resources()["CPU"]) == 2
        on_ray = _result(tmp_path / "cache", backend="ray")
    finally:
        ray.shutdown()
    assert _stable(on_ray) == _stable(local)
