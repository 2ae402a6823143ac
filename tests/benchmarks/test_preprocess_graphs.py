"""benchmarks/preprocess_graphs.py on small stand-ins: every step and component reported, edges accounted."""

from __future__ import annotations

import json

import pytest

from benchmarks import preprocess_graphs


@pytest.mark.parametrize(("standin", "graphs"), [("zinc", 40), ("pattern", 4)])
def test_the_benchmark_reports_every_component(standin, graphs, capsys):
    summary = preprocess_graphs.main(["--standin", standin, "--graphs", str(graphs),
                                      "preprocess.substructures.types.path_8=5"])
    out = capsys.readouterr().out
    assert json.loads(out.splitlines()[0])["dataset"] == f"{standin}-like stand-in"
    steps = [record["step"] for record in summary["records"]]
    assert steps == ["generate", "build", "save", "in_degree_histograms", "graph_statistics"]
    build = summary["records"][1]
    assert summary["records"][0]["graphs"] == graphs
    assert set(build["components"]) == {"substructures", "expander", "anchors", "lpe",
                                        "edges (graph, self, virtual, merge)"}
    assert sum(build["edge_counts"].values()) == build["edges"] and build["edge_counts"]["substructure"] > 0
    assert build["bytes_per_edge_in_memory"] > 0 and "| component |" in out
