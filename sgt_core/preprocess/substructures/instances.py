"""`Substructures`: substructure instances in columnar (CSR) form, what every step passes on."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sgt_core.preprocess.interaction_graph import SUBSTRUCTURE_TYPES

__all__ = ["Substructures"]


@dataclass(frozen=True, eq=False)
class Substructures:
    """Substructure instances in columnar (CSR) form.

    Instance i has member nodes ``members[ptr[i]:ptr[i + 1]]`` (distinct, ascending) and type
    ``SUBSTRUCTURE_TYPES[type_id[i]]``.

    Attributes:
        members: int64 [M], the member node ids of all instances back to back.
        ptr: int64 [S + 1], instance boundaries in ``members``.
        type_id: int64 [S], index into ``SUBSTRUCTURE_TYPES``.
    """

    members: np.ndarray
    ptr: np.ndarray
    type_id: np.ndarray

    def __len__(self) -> int:
        return int(self.type_id.shape[0])

    @property
    def sizes(self) -> np.ndarray:
        """int64 [S]: member count of each instance."""
        return np.diff(self.ptr)

    @property
    def instance_of_member(self) -> np.ndarray:
        """int64 [M]: the instance each entry of ``members`` belongs to."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.sizes)

    def instance(self, i: int) -> np.ndarray:
        """int64 [size_i]: the members of instance i."""
        return self.members[self.ptr[i] : self.ptr[i + 1]]

    def type_counts(self) -> dict[str, int]:
        counts = np.bincount(self.type_id, minlength=len(SUBSTRUCTURE_TYPES))
        return {name: int(c) for name, c in zip(SUBSTRUCTURE_TYPES, counts)}

    def select(self, indices: np.ndarray) -> Substructures:
        """A new `Substructures` holding the given instances, in the given order."""
        idx = np.asarray(indices, dtype=np.int64)
        sizes = self.sizes[idx]
        ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        # Gather the CSR segments of the chosen instances: flat positions start[i] + 0..size_i-1.
        offsets = np.arange(int(ptr[-1]), dtype=np.int64) - np.repeat(ptr[:-1], sizes)  # [M']
        members = self.members[np.repeat(self.ptr[idx], sizes) + offsets]  # [M']
        return Substructures(members=members, ptr=ptr, type_id=self.type_id[idx].copy())

    @classmethod
    def from_lists(cls, instances: list, type_ids: list[int] | np.ndarray) -> Substructures:
        """Builds from a list of node collections (deduplicated and sorted per instance) and their types."""
        arrays = [np.unique(np.asarray(m, dtype=np.int64)) for m in instances]
        sizes = np.array([a.size for a in arrays], dtype=np.int64)
        ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        members = np.concatenate(arrays) if arrays else np.empty(0, dtype=np.int64)
        return cls(members=members, ptr=ptr, type_id=np.asarray(type_ids, dtype=np.int64).reshape(-1))
