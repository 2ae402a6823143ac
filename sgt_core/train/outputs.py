"""The files the train stage writes into its folder: declared here once, read by every stage and tool."""

MODEL_FILE = "model.pt"  # the wide network's checkpoint (best epoch)
HISTORY_FILE = "history.json"  # one row per epoch: loss and validation metrics
SAMPLED_DEGREES_FILE = "sampled_degrees.json"  # per-layer histograms of the sampled degrees, for the plots
