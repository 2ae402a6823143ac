"""The files the export stage writes into its folder: declared here once, read by every stage and tool."""

SCORES_DIR = "attention_scores"  # one Parquet file per layer: (layer, src, dst, edge_type, score)
