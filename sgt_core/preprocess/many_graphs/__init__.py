"""Preprocessing a dataset of many small graphs: each component built inside every graph, vectorised across
graphs (graphs of one size stacked into dense blocks, the few large ones through the one-graph code)."""
