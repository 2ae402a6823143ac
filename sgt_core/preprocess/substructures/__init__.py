"""Substructure tokens (DeepGraph, Zhao et al., ICLR 2023), the data side: one module per step.

DeepGraph adds one token per sampled substructure and lets it attend only to its member nodes. These
modules build everything on the data side of that idea, as plain NumPy, in the order the pipeline runs
them (`sgt_core.preprocess.substructure_tokens`):

1. `matching.match_substructures` finds the instances of a fixed vocabulary (`SUBSTRUCTURE_TYPES`,
   DeepGraph Appendix C): induced cycles of 3..8 nodes, induced stars with 2..6 leaves, induced paths of
   4..8 nodes, capped 2-hop neighbourhoods and 10-step random-walk neighbourhoods.
2. `coverage.coverage_balanced_sample` picks a subset that covers every node about `threshold` times
   while using the types evenly (Appendix D).
3. `token_edges.substructure_token_edges` turns the picked instances into token nodes joined to their
   members.
4. `dfs_encoding.dfs_adjacency_encodings` gives each token its input feature: the instance's induced
   adjacency matrix written in a degree-ordered depth-first order (Appendix E), padded and flattened.

All of them pass instances around as `instances.Substructures` (columnar, CSR).

Every geometric type is matched as an *induced* subgraph, so an instance is exactly determined by its
node set: the set of nodes of an induced cycle, star or path admits only one such shape. That is what
makes "canonicalise by the sorted node tuple" exact: a cycle found from each of its rotations and
directions, or a path found from both ends, is one instance. (A non-induced match would conflate e.g.
the three different 4-cycles on the nodes of a K4.) Consequences worth knowing: a 6-cycle with a chord
counts as two smaller cycles, not as a 6-cycle; a triangle is no 2-leaf star.
"""
