"""The files the train stage writes into its folder, and those it keeps beside the stages' folders: declared
here once, read by every stage and tool (`sgt_core.train.kept_results` describes the latter for `sgt stages`)."""

from __future__ import annotations

MODEL_FILE = "model.pt"  # the wide network's checkpoint (best epoch)
HISTORY_FILE = "history.json"  # one row per epoch: loss and validation metrics
SAMPLED_DEGREES_FILE = "sampled_degrees.json"  # per-layer histograms of the sampled degrees, for the plots

# The top-k propagation rows' folder in the artifact store, beside the stages': `<paths.artifacts>/propagation/<key>/`.
# They are not a stage of the DAG: nothing but the train stage reads them, and they depend on three `model`
# options only, so a train stage that changes any other option (a tuning trial, every rank of a DDP run) reads them.
PROPAGATION = "propagation"
ROWS_FILE = "rows.pt"
