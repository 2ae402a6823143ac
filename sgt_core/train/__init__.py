"""Stage 4, train: the wide network on per-layer graphs sampled from the exported scores."""
