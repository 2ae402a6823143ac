"""The files the preprocess stage writes into its folder: declared here once, read by every stage and tool."""

INTERACTION_GRAPH_FILE = "interaction_graph.pt"  # the typed interaction graph (InteractionGraph.save)
IN_DEGREES_FILE = "in_degrees.json"  # in-degree histograms per edge type, for the plots
