"""Stage 1, preprocess: load a graph and build its typed interaction graph."""
