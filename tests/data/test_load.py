"""Feature scale: a warning for huge features, and `dataset.standardize` scaling each column."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from sgt_core.config import compose_config
from sgt_core.data import load_dataset
from sgt_core.data.load import LARGE_FEATURE, standardize_features
from sgt_core.errors import ConfigError
from sgt_core.pipeline import stage_keys

SPLIT = {"train": 0.5, "val": 0.25, "test": 0.25}


def write_graph(tmp_path: Path, features: np.ndarray) -> Path:
    """A path graph over the feature rows in the heterophilous .npz format, with a stratified fixed split."""
    num_nodes = features.shape[0]
    position = np.arange(num_nodes)
    path = tmp_path / "graph.npz"
    np.savez(
        path,
        node_features=features,
        node_labels=position % 2,
        edges=np.stack([position[:-1], position[1:]], axis=1),
        train_masks=position % 4 < 2,
        val_masks=position % 4 == 2,
        test_masks=position % 4 == 3,
    )
    return path


def npz_config(path: Path, **changes) -> dict:
    return {"name": "npz", "path": str(path), "split_index": 0, "split": SPLIT, **changes}


def features_with(value: float, row: int = 5, column: int = 2) -> np.ndarray:
    """20 x 4 unit-scale features, one entry set to `value`; column 3 is constant."""
    features = np.random.default_rng(0).normal(size=(20, 4))
    features[:, 3] = 7.0
    features[row, column] = value
    return features


def test_huge_feature_draws_a_warning_naming_column_and_value(tmp_path, caplog):
    path = write_graph(tmp_path, features_with(-1e30))
    with caplog.at_level(logging.WARNING, logger="sgt_core"):
        load_dataset(npz_config(path), seed=0)
    (record,) = [record for record in caplog.records if record.name.startswith("sgt_core")]
    message = record.getMessage()
    assert record.levelno == logging.WARNING
    assert message.startswith(f"{path}: feature column 2 holds -1e+30 (node 5)"), message
    assert "dataset.standardize=true" in message


def test_features_below_the_threshold_draw_no_warning(tmp_path, caplog):
    path = write_graph(tmp_path, features_with(LARGE_FEATURE / 2))
    with caplog.at_level(logging.WARNING, logger="sgt_core"):
        load_dataset(npz_config(path), seed=0)
    assert not [record for record in caplog.records if record.name.startswith("sgt_core")]


def test_standardize_gives_zero_mean_unit_variance_columns(tmp_path, caplog):
    features = features_with(1e30)
    path = write_graph(tmp_path, features)
    with caplog.at_level(logging.WARNING, logger="sgt_core"):
        graph = load_dataset(npz_config(path, standardize=True), seed=0)
    assert not caplog.records  # standardised features are not large
    x = graph.x.double()
    assert graph.x.dtype == torch.float32 and torch.isfinite(graph.x).all()
    assert torch.allclose(x[:, :3].mean(dim=0), torch.zeros(3, dtype=torch.float64), atol=1e-6)
    assert torch.allclose(x[:, :3].std(dim=0, unbiased=False), torch.ones(3, dtype=torch.float64), atol=1e-5)
    assert (graph.x[:, 3] == 0).all()  # the constant column
    # Every column is scaled separately: column 0 keeps its values' order and relative spacing.
    expected = (features[:, 0] - features[:, 0].mean()) / features[:, 0].std()
    np.testing.assert_allclose(graph.x[:, 0].numpy(), expected, rtol=1e-5, atol=1e-6)
    assert graph.num_nodes == 20 and graph.is_undirected() and graph.num_classes == 2


def test_standardize_constant_column_of_awkward_value_is_zero():
    # The float64 mean of many 0.1s is not exactly 0.1, which a std test would take for a tiny spread.
    x = torch.tensor([[0.1, 1.0], [0.1, 2.0], [0.1, 3.0]] * 7, dtype=torch.float32)
    standardized = standardize_features(x)
    assert (standardized[:, 0] == 0).all() and standardized[:, 1].abs().max() > 1


def test_standardize_must_be_a_boolean(tmp_path):
    with pytest.raises(ConfigError, match=r"dataset.standardize: must be true or false, found 'yes'"):
        load_dataset(npz_config(write_graph(tmp_path, features_with(1.0)), standardize="yes"), seed=0)


def test_standardize_enters_the_preprocess_cache_key():
    keys = {value: stage_keys(compose_config([f"dataset.standardize={value}"])) for value in ("false", "true")}
    assert keys["false"]["preprocess"] != keys["true"]["preprocess"]
