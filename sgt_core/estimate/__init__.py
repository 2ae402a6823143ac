"""Stage 2, estimate: train the narrow attention-score estimator on the full interaction graph."""
