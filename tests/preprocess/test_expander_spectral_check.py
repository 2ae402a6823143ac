"""The expander's near-Ramanujan check: a bounded Lanczos estimate, a lower bound close to the exact value."""

import logging
import math
import re

import numpy as np
import pytest

from sgt_core.errors import ConfigError
from sgt_core.preprocess import expander as expander_module
from sgt_core.preprocess.expander import hamiltonian_expander, second_eigenvalue_estimate


def _table(n, d, seed=0):
    return hamiltonian_expander(n, d, generator=np.random.default_rng(seed), ramanujan_slack=10.0).neighbours


def _exact_second(table):
    """Second-largest |eigenvalue| of the table's adjacency, from a dense eigendecomposition."""
    n, d = table.shape
    adjacency = np.zeros((n, n))
    adjacency[np.repeat(np.arange(n), d), table.ravel()] = 1.0
    return np.sort(np.abs(np.linalg.eigvalsh(adjacency)))[-2]


def _bipartite_table(n, d):
    """Neighbour table [n, d] of the bipartite double cover of a random d-regular graph on n/2 nodes.

    Node v and v + n/2 are the two copies of v; each edge u-v becomes u-(v + n/2) and v-(u + n/2).
    """
    half = _table(n // 2, d)
    return np.concatenate([half + n // 2, half])  # rows stay sorted


@pytest.mark.parametrize(("n", "d"), [(300, 6), (1500, 30)])
def test_estimate_matches_the_dense_value_from_below(n, d):
    table = _table(n, d)
    exact = _exact_second(table)
    estimate = second_eigenvalue_estimate(table)  # default 100 steps
    assert estimate.steps == 100 and estimate.residual >= 0.0
    assert estimate.value == pytest.approx(exact, abs=1e-5)
    # Ritz values lie inside the spectrum: a lower bound at any step count, up to rounding
    for steps in (5, 10, 20, 40):
        assert second_eigenvalue_estimate(table, steps).value <= exact + 1e-7


def test_step_count_is_what_was_asked_whatever_the_size():
    # the check's cost is bounded by the step count, not by n (ARPACK used to iterate until converged)
    table = _table(20_000, 10)
    estimate = second_eigenvalue_estimate(table, 25)
    assert estimate.steps == 25
    assert 2 * math.sqrt(9) - 0.5 < estimate.value <= 2 * math.sqrt(9) + 0.2
    assert second_eigenvalue_estimate(table, 25) == estimate  # deterministic


def test_small_graphs_are_solved_exactly():
    table = _table(40, 4)
    estimate = second_eigenvalue_estimate(table, 3)
    assert estimate.steps == 0 and estimate.residual == 0.0
    assert estimate.value == pytest.approx(_exact_second(table), abs=1e-10)


def test_bipartite_graph_has_estimate_d():
    table = _bipartite_table(400, 6)
    estimate = second_eigenvalue_estimate(table, 30)  # -d is isolated: found in few steps
    assert estimate.value == pytest.approx(6.0, abs=1e-6)


def test_bipartite_draws_are_rejected(monkeypatch):
    bipartite = _bipartite_table(500, 4)
    monkeypatch.setattr(expander_module, "_draw_cycle_union", lambda *args: bipartite)
    with pytest.raises(ConfigError, match=r"in 2 tries; best second eigenvalue found was 4\.0000"):
        hamiltonian_expander(500, 4, generator=np.random.default_rng(0), max_tries=2)


def test_the_check_is_logged(caplog):
    with caplog.at_level(logging.INFO, logger="sgt_core.preprocess.expander"):
        result = hamiltonian_expander(2000, 10, generator=np.random.default_rng(0), spectral_check_steps=60)
    assert result.spectral.steps == 60
    assert re.search(r"expander try 1: second \|eigenvalue\| \d+\.\d{4} \(Lanczos lower bound: 60 steps, "
                     r"residual \d\.\d\de[-+]\d\d\), bound 6\.1000", caplog.text)


@pytest.mark.parametrize("steps", [0, -3, 2.5, True])
def test_bad_step_count(steps):
    with pytest.raises(ConfigError, match="preprocess.expander.spectral_check_steps must be an integer >= 1"):
        hamiltonian_expander(100, 4, generator=np.random.default_rng(0), spectral_check_steps=steps)
