"""The 2-layer GCN baseline (PyG's GCNConv) on exactly the split our pipeline uses."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv

from sgt_core.data import load_dataset
from sgt_core.seeding import seed_everything
from sgt_core.tasks import Task, default_metric


class GCN(torch.nn.Module):
    def __init__(self, in_features: int, hidden: int, num_classes: int, dropout: float) -> None:
        super().__init__()
        self.first, self.second, self.dropout = GCNConv(in_features, hidden), GCNConv(hidden, num_classes), dropout

    def forward(self, x, edge_index):
        x = F.dropout(x, self.dropout, self.training)
        x = F.relu(self.first(x, edge_index))
        return self.second(F.dropout(x, self.dropout, self.training), edge_index)


def train_gcn(cfg: dict, hidden: int = 64, dropout: float = 0.5, lr: float = 0.01, epochs: int = 200) -> float:
    """Test metric at the best validation epoch (Kipf & Welling's settings, weight decay 5e-4)."""
    seed_everything(cfg["seed"])
    graph = load_dataset(cfg["dataset"], seed=cfg["seed"])
    model = GCN(graph.num_features, hidden, graph.num_classes, dropout)
    task = Task("node_classification", default_metric("node_classification", graph.num_classes), graph.num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=5e-4)
    best_val, best_test = float("-inf"), float("nan")
    for _ in range(epochs):
        model.train()
        loss = F.cross_entropy(model(graph.x, graph.edge_index)[graph.train_mask], graph.y[graph.train_mask])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(graph.x, graph.edge_index)
        val = task.value(task.metric, logits[graph.val_mask], graph.y[graph.val_mask])
        if val > best_val:
            best_val, best_test = val, task.value(task.metric, logits[graph.test_mask], graph.y[graph.test_mask])
    return best_test
