"""The defaults' choice (benchmarks/defaults.py): mean validation rank across datasets, not mean score."""

from __future__ import annotations

from benchmarks.defaults import ranking


def _rows(scores: dict[str, dict[str, list[float]]]) -> list[dict]:
    return [{"dataset": dataset, "candidate": candidate, "seed": seed, "val": value, "test": value}
            for dataset, by_candidate in scores.items()
            for candidate, values in by_candidate.items() for seed, value in enumerate(values)]


def test_ranks_follow_the_mean_validation_metric_per_dataset():
    rows = _rows({"a": {"x": [0.9, 0.8], "y": [0.84, 0.84]},  # x's mean 0.85 beats y's 0.84
                  "b": {"x": [0.5, 0.5], "y": [0.6, 0.6]}})
    ranks, mean_rank = ranking(rows)
    assert ranks == {"x": {"a": 1, "b": 2}, "y": {"a": 2, "b": 1}}
    assert mean_rank == {"x": 1.5, "y": 1.5}


def test_one_dataset_with_a_large_margin_does_not_decide():
    # z wins one dataset by 30 points and loses the other three narrowly: by mean score it would win,
    # by mean rank the candidate that is second nowhere and first on three datasets wins
    rows = _rows({"a": {"z": [0.95], "w": [0.65]}, "b": {"z": [0.70], "w": [0.71]},
                  "c": {"z": [0.70], "w": [0.71]}, "d": {"z": [0.70], "w": [0.71]}})
    _, mean_rank = ranking(rows)
    assert min(mean_rank, key=mean_rank.get) == "w"


def test_a_report_written_part_way_ranks_what_was_measured():
    rows = _rows({"a": {"x": [0.9], "y": [0.8]}, "b": {"x": [0.7]}})  # y not yet run on b
    ranks, mean_rank = ranking(rows)
    assert ranks == {"x": {"a": 1, "b": 1}, "y": {"a": 2}}
    assert mean_rank == {"x": 1.0, "y": 2.0}
