"""A dataset of one graph gets bit for bit the interaction graph it got before the per-graph components."""

from __future__ import annotations

import json

import pytest

from tests.preprocess.one_graph_cases import CHECKSUMS_FILE, cases, checksums

EXPECTED = json.loads(CHECKSUMS_FILE.read_text())
CASES = cases()


def test_every_case_has_a_stored_checksum():
    assert set(CASES) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_one_graph_interaction_graph_is_unchanged(name):
    found = checksums(CASES[name]())
    changed = sorted(field for field in EXPECTED[name] if found.get(field) != EXPECTED[name][field])
    assert not changed, f"{name}: fields changed: {changed}"
    assert set(found) == set(EXPECTED[name])
