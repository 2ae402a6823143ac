"""Seeded stratified random train/val/test split of a graph's nodes."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from sgt_core.errors import ConfigError

SPLIT_NAMES = ("train", "val", "test")


def check_split_fractions(split: Mapping[str, float], key: str = "dataset.split") -> np.ndarray:
    """Checks a split config and returns its fractions in (train, val, test) order.

    Args:
        split: Mapping with exactly the keys "train", "val" and "test", each a fraction in (0, 1],
            summing to at most 1.
        key: the config key the errors name (`dataset.split`, or `dataset.split_fractions` for molecules).

    Returns:
        float64 [3] fractions.

    Raises:
        ConfigError: If keys are missing or unknown, or the fractions are out of range.
    """
    fractions_of = key if key.endswith("fractions") else f"{key} fractions"
    if not isinstance(split, Mapping) or set(split) != set(SPLIT_NAMES):
        found = sorted(split) if isinstance(split, Mapping) else repr(split)
        raise ConfigError(f"{key} must have exactly the keys train, val, test; found {found}")
    try:
        fractions = np.array([float(split[name]) for name in SPLIT_NAMES])
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{fractions_of} must be numbers, found {dict(split)}") from error
    if not ((fractions > 0) & (fractions <= 1)).all():
        raise ConfigError(f"{fractions_of} must each lie in (0, 1], found {dict(split)}")
    # A small tolerance so that e.g. 0.6 + 0.2 + 0.2 (= 1.0000000000000002) is accepted.
    if fractions.sum() > 1 + 1e-9:
        raise ConfigError(f"{fractions_of} must sum to at most 1, found {fractions.sum():g}")
    return fractions


def check_split_index(split_index: int, num_splits: int, source: str) -> int:
    """Checks that `split_index` picks one of `num_splits` stored splits.

    Args:
        split_index: The configured 0-based split.
        num_splits: How many splits the dataset stores.
        source: File path or dataset named in the error message.

    Returns:
        The split index as a plain int.

    Raises:
        ConfigError: If it is not an integer in [0, num_splits).
    """
    if isinstance(split_index, bool) or not isinstance(split_index, int | np.integer):
        raise ConfigError(f"dataset.split_index must be an integer, found {split_index!r}")
    if not 0 <= split_index < num_splits:
        raise ConfigError(
            f"{source}: dataset.split_index={split_index} is out of range: it holds {num_splits} "
            f"split{'s' if num_splits != 1 else ''} (0..{num_splits - 1})"
        )
    return int(split_index)


def _apportion(class_sizes: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """Splits each class size into whole counts proportional to `shares`.

    Each class gets floor(share × size) nodes per split, and its leftover nodes (fewer than the number of
    splits) go to the splits that are furthest behind their exact total over all classes so far. So every
    count is within one node of its exact share, each class is fully assigned, and small classes do not
    all round the same way (two classes of 2 nodes split 50/25/25 give val one node and test the other).

    Args:
        class_sizes: int64 [C] nodes per class.
        shares: float64 [K] shares summing to 1.

    Returns:
        int64 [C, K] counts; row c sums to class_sizes[c].
    """
    exact = class_sizes[:, None] * shares[None, :]  # [C, K]
    counts = np.floor(exact).astype(np.int64)
    owed = np.zeros(shares.size)  # [K] exact total so far minus nodes given so far
    # A loop over classes, not nodes: C is small.
    for class_id, class_size in enumerate(class_sizes):
        owed += exact[class_id] - counts[class_id]
        leftover = int(class_size - counts[class_id].sum())
        # Stable sort: ties go to the earlier split (train before val before test).
        receivers = np.argsort(-owed, kind="stable")[:leftover]
        counts[class_id, receivers] += 1
        owed[receivers] -= 1
    return counts


def stratified_split(
    labels: np.ndarray, split: Mapping[str, float], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draws a random split in which every class is divided in the given proportions.

    Each class's count in each split is within one node of fraction × class size, and each split's
    total is close to fraction × N. When the fractions sum
    to 1 every node is assigned; otherwise the remainder is left out of all three masks.

    Args:
        labels: int [N] class ids >= 0.
        split: {"train": f, "val": f, "test": f}, see `check_split_fractions`.
        rng: Source of randomness (e.g. `numpy.random.default_rng(seed)`).

    Returns:
        (train_mask, val_mask, test_mask), bool [N] each, pairwise disjoint.

    Raises:
        ConfigError: If the split config is invalid.
    """
    fractions = check_split_fractions(split)
    # An extra "unassigned" share absorbs 1 - sum(fractions) so that rounding stays fair to all three.
    shares = np.append(fractions, max(0.0, 1.0 - fractions.sum()))
    labels = np.asarray(labels, dtype=np.int64)
    num_nodes = labels.shape[0]

    # Group nodes by class in random order: a stable sort of a random permutation keeps the shuffle
    # inside each class.
    shuffled = rng.permutation(num_nodes)
    by_class = shuffled[np.argsort(labels[shuffled], kind="stable")]  # [N]
    sorted_labels = labels[by_class]
    class_sizes = np.bincount(labels)  # [C]
    class_start = np.concatenate(([0], np.cumsum(class_sizes)[:-1]))  # [C]
    rank_in_class = np.arange(num_nodes) - class_start[sorted_labels]  # [N]

    bounds = np.cumsum(_apportion(class_sizes, shares), axis=1)  # [C, 4] end rank of each share
    part = (rank_in_class[:, None] >= bounds[sorted_labels]).sum(axis=1)  # [N] share index 0..3

    masks = []
    for index in range(len(SPLIT_NAMES)):
        mask = np.zeros(num_nodes, dtype=bool)
        mask[by_class[part == index]] = True
        masks.append(mask)
    return masks[0], masks[1], masks[2]
