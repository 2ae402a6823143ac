"""Components whose cost grows faster than the graph refuse large graphs early, with one clear error."""

from __future__ import annotations

import json

import pytest

from benchmarks import preprocess_scale
from sgt_core.config import compose_config
from sgt_core.config.preprocess import PreprocessConfig
from sgt_core.errors import ConfigError
from sgt_core.preprocess import stage
from sgt_core.preprocess.stage import check_size_limits
from tests.conftest import TINY_GRID


def _options(off: tuple[str, ...] = (), **switched) -> PreprocessConfig:
    options = compose_config()["preprocess"]
    for name, limit in switched.items():
        options[name].update(enabled=name not in off, max_nodes=limit)
    return PreprocessConfig.from_dict(options)  # a bad limit is named here, as when a run's config is checked


@pytest.mark.parametrize("name", ["anchors", "substructures", "lpe"])
def test_refused_above_the_limit(name):
    with pytest.raises(ConfigError, match=rf"^preprocess\.{name}\.enabled: refused on this graph of 1001 nodes, "
                                          rf"above preprocess\.{name}\.max_nodes=1000 \(.+\); switch it off"):
        check_size_limits(_options(**{name: 1000}), 1001)


def test_allowed_at_the_limit_without_one_or_when_off():
    check_size_limits(_options(anchors=1000, substructures=1000, lpe=1000), 1000)
    check_size_limits(_options(anchors=None, substructures=None, lpe=None), 10**9)
    check_size_limits(_options(off=("lpe",), lpe=10), 10**9)


@pytest.mark.parametrize("limit", [0, "big", 1.5, True])
def test_a_bad_limit_is_named(limit):
    with pytest.raises(ConfigError, match=r"^preprocess\.lpe\.max_nodes: must be null or an integer >= 1, found"):
        check_size_limits(_options(lpe=limit), 10)


def test_defaults_hold_a_limit_for_each_component():
    options = compose_config()["preprocess"]
    assert {name: options[name]["max_nodes"] for name in stage.SIZE_LIMITED} == {
        "anchors": 100_000, "substructures": 100_000, "lpe": 200_000}


def test_the_stage_refuses_before_any_long_work(tmp_path, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("long work started before the size check")

    monkeypatch.setattr(stage, "sample_substructure_tokens", never)
    monkeypatch.setattr(stage, "build_interaction_graph", never)
    cfg = compose_config([*TINY_GRID, "preprocess.substructures.enabled=true", "preprocess.lpe.enabled=true",
                          "preprocess.lpe.max_nodes=100"])  # a 12 x 12 grid: 144 nodes
    with pytest.raises(ConfigError, match=r"preprocess\.lpe\.max_nodes=100 "):
        stage.run_preprocess(cfg, {}, tmp_path)
    assert not list(tmp_path.iterdir())


def test_scale_benchmark_runs(capsys):
    preprocess_scale.main(["--nodes", "2000", "--expander-degree", "10"])
    summary = json.loads(capsys.readouterr().out)
    assert [step["step"] for step in summary["steps"]] == [
        "generate", "build", "save", "in_degree_histograms", "graph_statistics"]
    build = summary["steps"][1]
    assert build["num_edges"] == 2000 * 20 + 2000 + 2000 * 10  # graph (average degree 20), self, expander
    assert build["expander_lanczos_steps"] == 100 and summary["peak_rss_mb_after_generate"] > 0
