"""The files the estimate stage writes into its folder: declared here once, read by every stage and tool."""

SCORES_FILE = "attention_scores.pt"  # float [L, E]: the best epoch's per-layer attention scores
ESTIMATOR_FILE = "estimator.pt"  # the narrow network's checkpoint
HISTORY_FILE = "history.json"  # one row per epoch: loss, validation metrics, temperature
