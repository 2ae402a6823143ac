"""Coverage-balanced sampling: reaches the threshold, stops when candidates run out, balances the types."""

from __future__ import annotations

import numpy as np

from sgt_core.preprocess.interaction_graph import SUBSTRUCTURE_TYPES
from sgt_core.preprocess.substructures.coverage import coverage_balanced_sample
from sgt_core.preprocess.substructures.instances import Substructures
from sgt_core.preprocess.substructures.matching import match_substructures
from tests.preprocess.substructures.graphs import GEOMETRIC, grid


def test_coverage_reaches_threshold():
    edge_index, n = grid(20, 20, king=True)
    caps = dict.fromkeys(GEOMETRIC, 200) | {"hop2": None, "random_walk": None}
    subs = match_substructures(edge_index, n, types=caps, generator=np.random.default_rng(0))
    for threshold in (1, 2, 3):
        picks = coverage_balanced_sample(subs, n, threshold, np.random.default_rng(threshold))
        assert len(np.unique(picks)) == len(picks)
        coverage = np.bincount(subs.select(picks).members, minlength=n)
        assert coverage.min() >= threshold
        assert len(picks) < len(subs)  # stops once the target is met


def test_coverage_stops_when_candidates_run_out():
    subs = Substructures.from_lists([[0, 1], [0, 1], [2], [0, 1, 2]], [0, 0, 0, 1])
    picks = coverage_balanced_sample(subs, 6, 5, np.random.default_rng(0))
    assert sorted(picks.tolist()) == [0, 1, 2, 3]  # everything useful taken; nodes 3-5 are in nothing
    # A candidate that covers no under-covered node is never taken.
    subs = Substructures.from_lists([[0, 1], [0, 1], [2]], [0, 0, 0])
    picks = coverage_balanced_sample(subs, 3, 1, np.random.default_rng(0))
    assert len(picks) == 2 and 2 in picks.tolist()
    assert coverage_balanced_sample(subs, 3, 0, np.random.default_rng(0)).size == 0


def test_coverage_balances_types():
    n, copies = 60, 5
    instances, types = [], []
    for type_id, width in [(0, 2), (3, 3), (17, 5)]:
        for start in range(n - width + 1):
            for _ in range(copies):
                instances.append(range(start, start + width))
                types.append(type_id)
    subs = Substructures.from_lists(instances, types)
    picks = coverage_balanced_sample(subs, n, 4, np.random.default_rng(0))
    used = np.bincount(subs.type_id[picks], minlength=len(SUBSTRUCTURE_TYPES))[[0, 3, 17]]
    assert used.max() - used.min() <= 1, used
    assert np.bincount(subs.select(picks).members, minlength=n).min() >= 4


def test_coverage_prefers_least_covered_nodes():
    # Type 0 only. After {0..3} is taken, {0..3}-overlapping candidates lose to the disjoint {4..7}.
    subs = Substructures.from_lists([[0, 1, 2, 3], [1, 2, 3, 4], [4, 5, 6, 7]], [0, 0, 0])
    picks = coverage_balanced_sample(subs, 8, 1, np.random.default_rng(0))
    assert sorted(picks.tolist()) == [0, 2]
