"""SAN's LPE input: the m lowest Laplacian eigenpairs per node, of the graph or of each node's own graph."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import numpy as np

from sgt_core.config.preprocess import LpeConfig
from sgt_core.preprocess.components.base import ComponentOutput, GraphView
from sgt_core.preprocess.laplacian import laplacian_eigenpairs
from sgt_core.preprocess.many_graphs.spectra import laplacian_eigenpairs_per_graph

log = logging.getLogger(__name__)


class LaplacianEigenpairs:
    """Node fields `eigenvalues`, `eigenvectors`, `eigen_mask` [num_real, m] (no edges).

    One graph: `laplacian.laplacian_eigenpairs` of the whole graph. Many graphs: each graph's own Laplacian,
    in batches of equal-sized dense Laplacians (`many_graphs.spectra.laplacian_eigenpairs_per_graph`), graphs
    of fewer than m nodes padded and masked.
    """

    name = "lpe"

    def __init__(self, config: LpeConfig) -> None:
        self.config = config

    def __call__(self, graph: GraphView, earlier: Mapping[str, ComponentOutput]) -> ComponentOutput:
        started = time.perf_counter()
        log.info("preprocess: %d Laplacian eigenpairs for the LPE", self.config.m)
        if graph.graphs is None:
            values, vectors, mask = laplacian_eigenpairs(graph.edges, graph.num_real, self.config.m)
            stats = {"lpe_eigenpairs": int(mask[0].sum()) if graph.num_real else 0}
        else:
            values, vectors, mask = laplacian_eigenpairs_per_graph(graph.graphs, self.config.m)
            stats = {"lpe_eigenpairs": int(mask.sum(axis=1).max(initial=0)),
                     "lpe_padded_graphs": int(np.count_nonzero(graph.graphs.sizes < self.config.m))}
        stats["seconds_lpe"] = time.perf_counter() - started
        return ComponentOutput(stats=stats, fields={"eigenvalues": values, "eigenvectors": vectors, "eigen_mask": mask})
