"""The local branches' shared graph."""

from __future__ import annotations

import pytest

from sgt_core.config.preprocess import ExpanderConfig
from sgt_core.preprocess.builder import build_interaction_graph
from tests.models.local.graphs import random_graph


@pytest.fixture(scope="module")
def interaction_graph():
    return build_interaction_graph(random_graph(), self_loops=True, virtual_nodes=1, seed=0,
                                   expander=ExpanderConfig(degree=4, ramanujan_slack=1.0, max_tries=50))
