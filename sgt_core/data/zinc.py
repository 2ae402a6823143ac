"""The ZINC subset benchmark (Dwivedi et al.): 12,000 molecules as graphs of its 28 atom types, penalised logP targets.

The folder (../shared/datasets/zinc, README there) holds JT-VAE's validation and test pools (`valid.txt`,
`test.txt`), the benchmark's line numbers into them and into JT-VAE's `train.txt` (`subset_*.index`), its
reference targets for the validation and test molecules, and its vocabulary. Validation and test are the
benchmark's own 1,000 + 1,000 molecules, scored against the reference targets. Training uses the
benchmark's own 10,000 molecules when the user brings `train.txt`, else a stand-in: 10,000 molecules drawn
(seeded by `stand_in_seed`) from the lines of `valid.txt` outside the validation subset; JT-VAE's three
files are a random partition of one set of molecules, so the stand-in comes from the same distribution.
Training targets are computed by the benchmark's formula (`penalised_logp`).
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import numpy as np
from torch_geometric.data import Data

from sgt_core.data.many_graphs import build_graph_set
from sgt_core.data.molecule_graphs import describe_skipped, join_graphs, parse_molecules
from sgt_core.errors import ConfigError, DatasetError

log = logging.getLogger(__name__)

POOL_FILES = {"val": "valid.txt", "test": "test.txt"}
INDEX_FILES = {"train": "subset_train.index", "val": "subset_val.index", "test": "subset_test.index"}
REFERENCE_FILE = "subset_reference_targets.csv"
VOCABULARY_FILE = "vocabulary.json"
# JT-VAE's train.txt, which subset_train.index points into (not shipped with the benchmark's folder).
TRAIN_POOL_LINES = 220_011

# The benchmark's normalisation of the three terms of penalised logP (the folder's README):
# y = (logP - LOGP_MEAN) / LOGP_STD + (SA_MEAN - SA) / SA_STD + (CYCLE_MEAN - cycle) / CYCLE_STD.
LOGP_MEAN, LOGP_STD = 2.4570953, 1.4343244
SA_MEAN, SA_STD = 3.0525811, 0.8335207
CYCLE_MEAN, CYCLE_STD = 0.0485697, 0.2860212
# Rings longer than this count against the molecule, one unit per extra atom.
LARGEST_UNPENALISED_RING = 6

# An atom type of the vocabulary: element, explicit hydrogens ("H1"), charge sign ("+", "-"), e.g. "N H1 +".
ATOM_TYPE = re.compile(r"([A-Z][a-z]?)(?: H([1-9]))?(?: ([+-]))?")
# The vocabulary's bond types, by bond order (RDKit's SINGLE, DOUBLE, TRIPLE after kekulisation).
BOND_NAMES = ("single", "double", "triple")


def atom_type_key(token: str, source: str) -> tuple[str, int, int]:
    """(element, explicit hydrogens, formal charge) of a vocabulary atom type such as "N H1 +"."""
    match = ATOM_TYPE.fullmatch(token)
    if match is None:
        raise DatasetError(f"{source}: atom type {token!r} is not 'Element[ H<n>][ +|-]' (e.g. 'N H1 +')")
    element, hydrogens, sign = match.groups()
    return element, int(hydrogens or 0), {"+": 1, "-": -1, None: 0}[sign]


def atom_type_name(element: str, hydrogens: int, charge: int) -> str:
    """The vocabulary's spelling of an atom type, e.g. ("N", 1, 1) -> "N H1 +" (any charge, for messages)."""
    charge_name = {0: "", 1: " +", -1: " -"}.get(charge, f" {charge:+d}")
    return f"{element}{f' H{hydrogens}' if hydrogens else ''}{charge_name}"


def read_vocabulary(path: Path) -> tuple[dict[tuple[str, int, int], int], int, np.ndarray, int]:
    """The atom types' and bond types' codes: their positions in `vocabulary.json`.

    Returns:
        (element, hydrogens, charge) -> atom code; the number of atom types; int64 [4] the bond code of
        bond order 1, 2, 3 at that position (-1 at 0); the number of bond types ("none", code 0, is never
        used: every edge is a bond).
    """
    source = str(path)
    try:
        vocabulary = json.loads(path.read_text())
        atom_types, bond_types = list(vocabulary["atom_types"]), list(vocabulary["bond_types"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise DatasetError(f"{source}: expected JSON with lists atom_types and bond_types ({error!r})") from error
    atom_codes = {atom_type_key(token, source): code for code, token in enumerate(atom_types)}
    missing = [name for name in BOND_NAMES if name not in bond_types]
    if len(atom_codes) != len(atom_types) or missing:
        raise DatasetError(f"{source}: atom types must be distinct and bond types must include {BOND_NAMES}; found "
                           f"{len(atom_types)} atom types ({len(atom_codes)} distinct), bond types {bond_types}")
    bond_code_by_order = np.array([-1, *(bond_types.index(name) for name in BOND_NAMES)], dtype=np.int64)
    return atom_codes, len(atom_types), bond_code_by_order, len(bond_types)


def read_lines(path: Path) -> list[str]:
    """A file's lines (one SMILES each), without their line ends."""
    try:
        return path.read_text().splitlines()
    except OSError as error:
        raise DatasetError(f"{path}: cannot read ({error.strerror or error})") from error


def read_index(path: Path, pool: str, pool_size: int | None) -> np.ndarray:
    """The 0-based line numbers of one comma-separated line, distinct and within the pool's lines.

    Args:
        path: a subset_*.index file.
        pool: the file its numbers point into, for messages.
        pool_size: that file's number of lines (None: not checked here).
    """
    try:
        index = np.array([int(value) for value in path.read_text().split(",")], dtype=np.int64)
    except OSError as error:
        raise DatasetError(f"{path}: cannot read ({error.strerror or error})") from error
    except ValueError as error:
        raise DatasetError(f"{path}: expected one line of comma-separated line numbers ({error})") from error
    unique, counts = np.unique(index, return_counts=True)
    if (counts > 1).any():
        raise DatasetError(f"{path}: line {int(unique[counts > 1][0])} of {pool} is listed twice")
    outside = index < 0 if pool_size is None else (index < 0) | (index >= pool_size)
    if outside.any():
        size = "" if pool_size is None else f", which has {pool_size:,} lines (0-based numbers 0..{pool_size - 1:,})"
        raise DatasetError(f"{path}: line number {int(index[outside][0])} is outside {pool}{size}")
    return index


def read_reference_targets(path: Path, subsets: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The benchmark's targets of its validation and test molecules, in their subset's order.

    Each row (`split,position,line,y`) must agree with the subset files: its `line` is the subset's
    `position`-th line number, every position present once.
    """
    try:
        rows = [line.split(",") for line in path.read_text().splitlines()]
    except OSError as error:
        raise DatasetError(f"{path}: cannot read ({error.strerror or error})") from error
    if not rows or rows[0] != ["split", "position", "line", "y"]:
        raise DatasetError(f"{path}: expected the header split,position,line,y; found {rows[:1]}")
    targets = {}
    for split, lines in subsets.items():
        chosen = [(number, row) for number, row in enumerate(rows[1:], start=2) if row[0] == split]
        try:
            positions = np.array([int(row[1]) for _, row in chosen], dtype=np.int64)
            line_numbers = np.array([int(row[2]) for _, row in chosen], dtype=np.int64)
            values = np.array([float(row[3]) for _, row in chosen], dtype=np.float64)
        except (ValueError, IndexError) as error:
            raise DatasetError(f"{path}: a {split} row is not split,position,line,y with numbers ({error})") from error
        if np.sort(positions).tolist() != list(range(lines.size)):
            raise DatasetError(f"{path}: expected one {split} row for each position 0..{lines.size - 1}; found "
                               f"{positions.size} rows")
        disagree = line_numbers != lines[positions]
        if disagree.any():
            number = chosen[int(np.flatnonzero(disagree)[0])][0]
            raise DatasetError(f"{path}: line {number} names a different molecule than {INDEX_FILES[split]} at its "
                               "position; the reference targets and the subset files do not belong together")
        targets[split] = values[np.argsort(positions)]
    return targets


def penalised_logp(molecule) -> float:
    """The benchmark's target ("constrained solubility") of an RDKit molecule as parsed, before kekulisation.

    logP is RDKit's Crippen estimate, SA its Contrib synthetic-accessibility score, and the ring penalty
    max(0, L - 6) with L the longest cycle of a cycle basis (`longest_basis_cycle`).
    """
    from rdkit.Chem import Descriptors

    from sgt_core.data.sa_score import synthetic_accessibility

    # Both sums over atoms and fragments do not depend on the atom order, so they are computed on the
    # molecule as parsed rather than on the canonical re-parse the benchmark used (they agree to 1e-14).
    ring_penalty = max(0, longest_basis_cycle(molecule) - LARGEST_UNPENALISED_RING)
    return ((Descriptors.MolLogP(molecule) - LOGP_MEAN) / LOGP_STD
            + (SA_MEAN - synthetic_accessibility(molecule)) / SA_STD
            + (CYCLE_MEAN - ring_penalty) / CYCLE_STD)


def longest_basis_cycle(molecule) -> int:
    """The longest cycle of networkx's `cycle_basis` of the atom adjacency, as the benchmark computed it.

    The benchmark took the basis of the molecule re-parsed from RDKit's canonical isomeric SMILES, with
    atoms in that order (not RDKit's smallest rings): over fused rings, the basis may hold a cycle around
    two rings instead of one of them, depending on the atom order. Where no atom lies in two rings and
    there are as many rings as independent cycles, those rings are the only cycles of the molecule and so
    every basis; their largest is the answer without re-parsing.

    Returns:
        The length of the longest basis cycle; 0 for a molecule without rings.
    """
    import networkx
    from rdkit import Chem

    rings = molecule.GetRingInfo().AtomRings()
    ring_atoms = [atom for ring in rings for atom in ring]
    independent_cycles = molecule.GetNumBonds() - molecule.GetNumAtoms() + len(Chem.GetMolFrags(molecule))
    if len(ring_atoms) == len(set(ring_atoms)) and len(rings) == independent_cycles:
        return max(map(len, rings), default=0)
    canonical = Chem.MolFromSmiles(Chem.MolToSmiles(molecule))
    # The benchmark's graph was networkx.Graph(adjacency matrix): atoms added in order, then the bonds in
    # row-major order of the matrix, so each atom's neighbours in ascending order; the basis follows that
    # order. Adding the bonds (i < j) in row-major order builds the same graph in half the time.
    begin, end = np.nonzero(np.triu(Chem.GetAdjacencyMatrix(canonical)))
    graph = networkx.Graph()
    graph.add_nodes_from(range(canonical.GetNumAtoms()))
    graph.add_edges_from(zip(begin.tolist(), end.tolist()))
    cycles = networkx.cycle_basis(graph)
    return max(map(len, cycles), default=0)


def featurise(molecule, atom_codes: dict, bond_code_by_order: np.ndarray,
              where: str) -> tuple[list[int], np.ndarray, np.ndarray]:
    """A molecule's atom codes, bonds and bond codes in the benchmark's vocabulary; kekulises it in place.

    An atom's type is its element, its explicit hydrogens (those a SMILES writes in brackets, e.g. [C@@H],
    [NH3+]) and its charge; aromatic rings are kekulised first, so every bond is single, double or triple.

    Args:
        molecule (rdkit.Chem.Mol): an RDKit molecule as parsed (sanitised).
        atom_codes: (element, explicit hydrogens, charge) -> code.
        bond_code_by_order: int64 [4], the code of bond order 1, 2, 3 (`read_vocabulary`).
        where: the molecule's file and line, for errors.

    Returns:
        atom codes [n], bonds int64 [b, 2] as atom indices (each bond once), bond codes int64 [b].

    Raises:
        DatasetError: If an atom or bond type is not in the vocabulary, naming `where`.
    """
    from rdkit import Chem

    Chem.Kekulize(molecule, clearAromaticFlags=True)
    atoms = map(molecule.GetAtomWithIdx, range(molecule.GetNumAtoms()))  # faster than GetAtoms()' sequence
    keys = [(atom.GetSymbol(), atom.GetNumExplicitHs(), atom.GetFormalCharge()) for atom in atoms]
    try:
        codes = [atom_codes[key] for key in keys]
    except KeyError as error:
        raise DatasetError(f"{where}: atom type {atom_type_name(*error.args[0])!r} is not in the benchmark's "
                           f"vocabulary ({VOCABULARY_FILE}: {len(atom_codes)} types)") from None
    # The bond-order matrix gives every bond at once, faster than a loop over bonds (force: RDKit caches a
    # molecule's matrix). A bond of order 0 would be missing from it, an aromatic one of order 1.5.
    orders = Chem.GetAdjacencyMatrix(molecule, useBO=True, force=True)  # [n, n]
    begin, end = np.nonzero(np.triu(orders))
    bond_orders = orders[begin, end]  # [b]
    known = np.isin(bond_orders, (1.0, 2.0, 3.0))
    if begin.size != molecule.GetNumBonds() or not known.all():
        found = sorted(str(bond.GetBondType()).lower() for bond in molecule.GetBonds())
        raise DatasetError(f"{where}: after kekulisation the bonds are {', '.join(dict.fromkeys(found))}; the "
                           f"benchmark's bond types are {', '.join(BOND_NAMES)}")
    return codes, np.stack([begin, end], axis=1), bond_code_by_order[bond_orders.astype(np.int64)]


def _absolute(path: str | Path) -> Path:
    # Absolute, so that messages stay unambiguous whatever the working directory.
    return Path(os.path.abspath(Path(path).expanduser()))


def load_zinc(
    path: str | Path = "../shared/datasets/zinc",
    train_smiles: str | Path | None = None,
    stand_in_seed: int = 0,
    skip_invalid: bool = False,
    seed: int = 0,
) -> Data:
    """Loads the ZINC subset: 10,000 training, 1,000 validation and 1,000 test molecules, graph regression.

    Args:
        path: the benchmark's folder (README of ../shared/datasets).
        train_smiles: JT-VAE's `train.txt`, whose lines `subset_train.index` names: the benchmark's own
            training molecules. None: the stand-in training set.
        stand_in_seed: draws the stand-in training set; fixed by this key, not by the run's seed, so that
            every model seed trains on the same molecules.
        skip_invalid: skip molecules RDKit cannot parse (logged and noted) instead of failing.
        seed: the run's seed; unused (see `stand_in_seed`).

    Returns:
        The graph set: x_cat [N, 1] atom types (28), edge_attr_cat [E, 1] bond types (4, "none" unused),
        y [G, 1], masks over graphs in the order train, val, test; `notes["zinc_train_set"]` says which
        training set was used.

    Raises:
        DatasetError: A file is missing or malformed, or a molecule cannot be parsed or typed.
        ConfigError: `stand_in_seed` is not an integer, `skip_invalid` not a boolean.
    """
    if isinstance(stand_in_seed, bool) or not isinstance(stand_in_seed, int | np.integer) or stand_in_seed < 0:
        raise ConfigError(f"dataset.stand_in_seed must be an integer >= 0, found {stand_in_seed!r}")
    if not isinstance(skip_invalid, bool):
        raise ConfigError(f"dataset.skip_invalid must be true or false, found {skip_invalid!r}")
    folder = _absolute(path)
    needed = [*POOL_FILES.values(), *INDEX_FILES.values(), REFERENCE_FILE, VOCABULARY_FILE]
    missing = [name for name in needed if not (folder / name).is_file()]
    if missing:
        raise DatasetError(f"{folder}: not the ZINC benchmark's folder: {', '.join(missing)} missing (expected "
                           f"{', '.join(needed)})")
    atom_codes, num_atom_types, bond_code_by_order, num_bond_types = read_vocabulary(folder / VOCABULARY_FILE)
    pools = {split: read_lines(folder / name) for split, name in POOL_FILES.items()}
    subsets = {split: read_index(folder / INDEX_FILES[split], POOL_FILES[split], len(pools[split]))
               for split in POOL_FILES}
    references = read_reference_targets(folder / REFERENCE_FILE, subsets)
    train_file, train_pool, train_lines, train_note = _training_set(folder, train_smiles, stand_in_seed, pools["val"],
                                                                    subsets["val"])

    # Every molecule in the graph set's order: training, validation, test.
    files = ([train_file] * train_lines.size + [folder / POOL_FILES["val"]] * subsets["val"].size
             + [folder / POOL_FILES["test"]] * subsets["test"].size)
    lines = np.concatenate([train_lines, subsets["val"], subsets["test"]])
    smiles = ([train_pool[line] for line in train_lines] + [pools["val"][line] for line in subsets["val"]]
              + [pools["test"][line] for line in subsets["test"]])
    split_of = np.repeat([0, 1, 2], [train_lines.size, subsets["val"].size, subsets["test"].size])  # [G0]

    def where(position: int) -> str:
        file = files[position]
        return f"{file.name if file.parent == folder else file} line {lines[position] + 1}"

    molecules, kept = parse_molecules(str(folder), smiles, where, skip_invalid)
    split_of = split_of[kept]
    num_train = int((split_of == 0).sum())
    # Targets first: kekulising (below) changes the aromaticity that logP and SA read.
    computed = [penalised_logp(molecule) for molecule in molecules[:num_train]]
    reference = np.concatenate([references["val"], references["test"]])[kept[num_train:] - train_lines.size]
    y = np.concatenate([np.asarray(computed, dtype=np.float64), reference]).astype(np.float32)  # [G]

    atom_counts, bond_counts, atoms, ends, bonds = [], [], [], [], []
    for position, molecule in zip(kept.tolist(), molecules, strict=True):
        molecule_atoms, molecule_ends, molecule_bonds = featurise(molecule, atom_codes, bond_code_by_order,
                                                                  f"{folder}: {where(position)}")
        atom_counts.append(len(molecule_atoms))
        bond_counts.append(len(molecule_bonds))
        atoms += molecule_atoms
        ends.append(molecule_ends)
        bonds.append(molecule_bonds)
    graph_ptr, edge_index = join_graphs(atom_counts, bond_counts, np.concatenate(ends))

    notes = {"zinc_train_set": train_note,
             "zinc_targets": ("validation and test: the benchmark's reference targets (subset_reference_targets.csv); "
                              "training: penalised logP computed here with RDKit by the benchmark's formula")}
    if kept.size < len(smiles):
        skipped = np.setdiff1d(np.arange(len(smiles)), kept)
        notes["zinc_skipped"] = describe_skipped(skipped.tolist(), len(smiles), where)
    return build_graph_set(
        str(folder),
        task="graph_regression",
        graph_ptr=graph_ptr,
        edge_index=edge_index,
        y=y[:, None],
        train_mask=split_of == 0,
        val_mask=split_of == 1,
        test_mask=split_of == 2,
        x_cat=np.asarray(atoms, dtype=np.int64)[:, None],
        x_cat_sizes=[num_atom_types],
        edge_attr_cat=np.concatenate(bonds)[:, None],
        edge_attr_cat_sizes=[num_bond_types],
        metric="mae",
        notes=notes,
    )


def _training_set(folder: Path, train_smiles: str | Path | None, stand_in_seed: int, val_pool: list[str],
                  val_subset: np.ndarray) -> tuple[Path, list[str], np.ndarray, str]:
    """The training molecules: their file, its lines, their 0-based line numbers in it, and the note naming the set."""
    index_file = folder / INDEX_FILES["train"]
    if train_smiles is not None:
        train_file = _absolute(train_smiles)
        if not train_file.is_file():
            raise DatasetError(f"{train_file}: not found; dataset.train_smiles must be JT-VAE's train.txt "
                               f"({TRAIN_POOL_LINES:,} lines), or null for the stand-in training set")
        pool = read_lines(train_file)
        lines = read_index(index_file, str(train_file), len(pool))
        return train_file, pool, lines, (f"the benchmark's own: {lines.size:,} molecules of JT-VAE's train.txt "
                                         f"({train_file}) by subset_train.index; validation and test are the "
                                         "benchmark's own")
    size = read_index(index_file, "train.txt", None).size
    # Lines of valid.txt outside the validation subset, so that no training molecule is a validation one.
    candidates = np.setdiff1d(np.arange(len(val_pool)), val_subset)
    if candidates.size < size:
        raise DatasetError(f"{folder / POOL_FILES['val']}: {candidates.size:,} lines outside the validation subset, "
                           f"fewer than the {size:,} training molecules the stand-in draws")
    lines = np.sort(np.random.default_rng(stand_in_seed).choice(candidates, size=size, replace=False))
    return folder / POOL_FILES["val"], val_pool, lines, (
        f"stand-in: {size:,} molecules drawn (stand_in_seed={stand_in_seed}) from JT-VAE's valid.txt outside the "
        "validation subset; validation and test are the benchmark's own")
