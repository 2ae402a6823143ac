"""The conductor benchmark's summary: medians per checkout over its runs."""

from __future__ import annotations

from benchmarks.conductor import summary


def row(checkout: str, wall: float, stages: tuple[float, ...], flow_mb: float) -> dict:
    return {"checkout": checkout, "wall_s": wall, "stage_s": dict(zip("abcd", stages)),
            "beyond_stages_s": wall - sum(stages), "peak_rss_mb": {"flow": flow_mb, "largest other": 400.0,
                                                                  "prefect server": 200.0},
            "peak_pss_mb": {"tree": flow_mb + 300.0, "shared server": 150.0}, "prefect_server": "the shared one"}


def test_the_summary_gives_each_checkouts_medians():
    rows = [row("new", 90.0, (1, 13, 1, 50), 280.0), row("old", 97.0, (1, 13, 1, 50), 710.0),
            row("new", 80.0, (1, 12, 1, 45), 300.0), row("old", 99.0, (1, 14, 1, 50), 720.0),
            row("new", 95.0, (1, 13, 1, 60), 260.0), row("old", 98.0, (1, 13, 1, 51), 700.0)]
    rows.append({**row("new", 6.0, (0, 0, 0, 0), 250.0), "cached": True})
    new, old, cached = summary(rows).splitlines()[2:]
    assert new == ("| new | 3 | 90.0 | 65.0 | 21.0 (25.0, 21.0, 20.0) | 280 | 400 | 200 | 580 | 150 | "
                   "the shared one, the shared one, the shared one |")
    assert old.startswith("| old | 3 | 98.0 | 66.0 | 32.0 (32.0, 33.0, 32.0) | 710 |")
    assert cached.startswith("| new (cached rerun) | 1 | 6.0 | 0.0 | 6.0 (6.0) | 250 |")
