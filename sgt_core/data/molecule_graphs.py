"""Molecules from SMILES: parsed by RDKit (one clear error per bad row, or skipped), joined into one union of graphs.

RDKit is imported inside the functions: `sgt_core.data.load` imports every loader module, and only a run
that loads molecules should pay for RDKit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from sgt_core.errors import DatasetError

log = logging.getLogger(__name__)

# How many skipped rows a log line or a note names before "...".
NAMED_ROWS = 5


def invalid_reason(smiles: object) -> str:
    """Why RDKit does not make a molecule of `smiles`: empty, bad syntax, or the sanitiser's complaint."""
    from rdkit import Chem, rdBase

    if not isinstance(smiles, str) or not smiles.strip():
        return "the SMILES is missing (empty)"
    with rdBase.BlockLogs():
        unsanitised = Chem.MolFromSmiles(smiles, sanitize=False)
        if unsanitised is None:
            return f"SMILES {smiles!r} is not valid SMILES syntax"
        if unsanitised.GetNumAtoms() == 0:
            return f"SMILES {smiles!r} has no atoms"
        try:
            Chem.SanitizeMol(unsanitised)
        except Chem.MolSanitizeException as error:  # valence, kekulisation, aromaticity
            return f"SMILES {smiles!r} is not a valid molecule ({' '.join(str(error).split())})"
    return f"SMILES {smiles!r} is not a valid molecule"


def parse_molecules(
    source: str, smiles: Sequence[object], where: Callable[[int], str], skip_invalid: bool
) -> tuple[list, np.ndarray]:
    """Parses each SMILES with RDKit's defaults (sanitised, hydrogens implicit), as OGB and the ZINC benchmark do.

    Args:
        source: the file, named in errors and logs.
        smiles: one SMILES per molecule (a missing one may be None or NaN).
        where: position -> where that molecule is in the file, e.g. "row 3 (0-based; line 5)".
        skip_invalid: skip molecules RDKit cannot make (logged: how many, and the first rows) instead of
            raising.

    Returns:
        The RDKit molecules and int64 [M] the positions in `smiles` they come from (all of them unless skipped).

    Raises:
        DatasetError: At the first molecule RDKit cannot make, naming the file, where, and why (or, skipping
            them, when none is left).
    """
    from rdkit import Chem, rdBase

    molecules, kept, skipped = [], [], []
    with rdBase.BlockLogs():  # each failure is reported once, by the error or the log line below
        for position, text in enumerate(smiles):
            molecule = Chem.MolFromSmiles(text) if isinstance(text, str) and text.strip() else None
            if molecule is not None and molecule.GetNumAtoms() > 0:
                molecules.append(molecule)
                kept.append(position)
                continue
            if not skip_invalid:
                raise DatasetError(f"{source}: {where(position)}: {invalid_reason(text)}; fix or remove it, or "
                                   "set dataset.skip_invalid=true to skip such molecules")
            skipped.append(position)
    if skipped:
        log.warning("%s: skipped %s", source, describe_skipped(skipped, len(smiles), where))
    if not len(smiles):
        raise DatasetError(f"{source}: no molecule to load: it holds no SMILES (no rows below its header)")
    if not molecules:
        raise DatasetError(f"{source}: no molecule to load: RDKit parses none of its {len(smiles):,} SMILES")
    return molecules, np.asarray(kept, dtype=np.int64)


def describe_skipped(skipped: Sequence[int], total: int, where: Callable[[int], str]) -> str:
    """"7 of 41,127 molecules that RDKit cannot parse (first: row 137 ...; ...)", for logs and notes."""
    first = "; ".join(where(position) for position in skipped[:NAMED_ROWS])
    more = "; ..." if len(skipped) > NAMED_ROWS else ""
    return f"{len(skipped):,} of {total:,} molecules that RDKit cannot parse (first: {first}{more})"


def join_graphs(
    atom_counts: Sequence[int], bond_counts: Sequence[int], bond_ends: np.ndarray | Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint union of molecules: each one's atoms a contiguous range, its bonds moved onto them.

    Args:
        atom_counts: atoms per molecule [G].
        bond_counts: bonds per molecule [G].
        bond_ends: per molecule in order, each bond's two atom indices within its molecule: [B, 2], or
            flattened [2 * B] (begin, end, begin, end, ...).

    Returns:
        graph_ptr int64 [G+1] and edge_index int64 [2, B] (each bond once) in the union's node ids.
    """
    graph_ptr = np.concatenate(([0], np.cumsum(np.asarray(atom_counts, dtype=np.int64))))  # [G+1]
    local = np.asarray(bond_ends, dtype=np.int64).reshape(-1, 2)  # [B, 2] atom indices within the molecule
    first_atom = np.repeat(graph_ptr[:-1], np.asarray(bond_counts, dtype=np.int64))  # [B]
    return graph_ptr, np.ascontiguousarray((local + first_atom[:, None]).T)
