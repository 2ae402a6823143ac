"""The ZINC loader: hand-checked atom and bond types, targets against the benchmark's, the stand-in training set."""

import json
from pathlib import Path

import numpy as np
import pytest

from sgt_core.data import load_dataset
from sgt_core.data.zinc import featurise, longest_basis_cycle, penalised_logp, read_vocabulary
from sgt_core.errors import DatasetError

# A miniature benchmark folder, written into tmp_path: hand-made molecules and a hand-made vocabulary.
VOCABULARY = {"atom_types": ["C", "O", "N", "C H1", "O -", "N H3 +", "N H1 +"],
              "bond_types": ["none", "single", "double", "triple"]}
VALID = ["CCO", "c1ccccc1", "CC(=O)[O-]", "C[NH3+]", "CCN", "OCCO", "CC#N", "c1cc[nH+]cc1", "C1CCCCC1", "CCCO",
         "NCCO", "C[C@@H](O)CC"]
TEST = ["CC", "CO", "CN", "C=O"]
VAL_LINES, TEST_LINES = [1, 3, 5], [2, 0]
REFERENCE = {"val": [0.5, -1.25, 2.0], "test": [3.5, -0.75]}
TRAIN_LINES = [4, 0, 2, 1]  # into a train.txt (the stand-in draws as many molecules)


def write_folder(folder: Path, valid=VALID, reference=REFERENCE, vocabulary=VOCABULARY) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "valid.txt").write_text("\n".join(valid) + "\n")
    (folder / "test.txt").write_text("\n".join(TEST) + "\n")
    for name, lines in (("train", TRAIN_LINES), ("val", VAL_LINES), ("test", TEST_LINES)):
        (folder / f"subset_{name}.index").write_text(",".join(map(str, lines)))
    rows = ["split,position,line,y"] + [
        f"{split},{position},{line},{value}"
        for split, lines in (("val", VAL_LINES), ("test", TEST_LINES))
        for position, (line, value) in enumerate(zip(lines, reference[split], strict=True))]
    (folder / "subset_reference_targets.csv").write_text("\n".join(rows) + "\n")
    (folder / "vocabulary.json").write_text(json.dumps(vocabulary))
    return folder


def load(folder: Path, seed: int = 0, **keys):
    return load_dataset({"name": "zinc", "path": str(folder), **keys}, seed=seed)


def typed(smiles: str, vocabulary_path: Path) -> tuple[list[str], list[tuple[int, int, str]]]:
    """A molecule's atom types and (begin, end, bond type) by the vocabulary's names."""
    from rdkit import Chem

    vocabulary = json.loads(vocabulary_path.read_text())
    atom_codes, _, bond_code_by_order, _ = read_vocabulary(vocabulary_path)
    codes, bonds, bond_codes = featurise(Chem.MolFromSmiles(smiles), atom_codes, bond_code_by_order, smiles)
    names = [vocabulary["atom_types"][code] for code in codes]
    return names, [(int(a), int(b), vocabulary["bond_types"][code]) for (a, b), code in zip(bonds, bond_codes,
                                                                                          strict=True)]


# --- the benchmark's vocabulary on hand-checked molecules ------------------------------------------------------


@pytest.mark.parametrize("smiles, atom_types", [
    ("c1cc[nH]c1", ["C", "C", "C", "N", "C"]),  # pyrrole: the H of [nH] is implicit once parsed, no "N H1" type
    ("C[C@@H](O)C(=O)[O-]", ["C", "C H1", "O", "C", "O", "O -"]),  # a bracketed H is explicit
    ("C[NH3+]", ["C", "N H3 +"]),
    ("c1cc[nH+]cc1", ["C", "C", "C", "N H1 +", "C", "C"]),
    ("C[N+](C)(C)C", ["C", "N +", "C", "C", "C"]),
    ("[NH-]S(=O)(=O)c1ccccc1", ["N H1 -", "S", "O", "O", "C", "C", "C", "C", "C", "C"]),
    ("ClC(Br)(F)I", ["Cl", "C", "Br", "F", "I"]),
    ("C[S-]", ["C", "S -"]),
])
def test_atom_types_on_hand_checked_molecules(shared_datasets, smiles, atom_types):
    names, _ = typed(smiles, shared_datasets / "zinc" / "vocabulary.json")
    assert names == atom_types


def test_aromatic_rings_are_kekulised_into_single_and_double_bonds(shared_datasets):
    vocabulary = shared_datasets / "zinc" / "vocabulary.json"
    _, benzene = typed("c1ccccc1", vocabulary)
    assert sorted(kind for *_, kind in benzene) == ["double"] * 3 + ["single"] * 3
    double_bonds_per_atom = np.bincount([end for a, b, kind in benzene if kind == "double" for end in (a, b)])
    assert double_bonds_per_atom.tolist() == [1] * 6  # alternating around the ring
    _, pyrrole = typed("c1cc[nH]c1", vocabulary)
    assert sorted(kind for *_, kind in pyrrole) == ["double"] * 2 + ["single"] * 3
    assert all(kind == "single" for a, b, kind in pyrrole if 3 in (a, b))  # the NH takes no double bond
    _, nitrile = typed("CC#N", vocabulary)
    assert nitrile == [(0, 1, "single"), (1, 2, "triple")]


def test_every_benchmark_validation_and_test_molecule_is_typed_within_the_vocabulary(shared_datasets):
    from rdkit import Chem

    folder = shared_datasets / "zinc"
    atom_codes, num_atom_types, bond_code_by_order, _ = read_vocabulary(folder / "vocabulary.json")
    assert num_atom_types == 28
    for pool, subset in (("valid.txt", "subset_val.index"), ("test.txt", "subset_test.index")):
        lines = (folder / pool).read_text().splitlines()
        for line in map(int, (folder / subset).read_text().split(",")):
            codes, _, bond_codes = featurise(Chem.MolFromSmiles(lines[line]), atom_codes, bond_code_by_order,
                                             f"{pool} line {line + 1}")
            assert max(codes) < 28 and set(bond_codes.tolist()) <= {1, 2, 3}


# --- the targets against the benchmark's -----------------------------------------------------------------------


def _subset(folder: Path, split: str) -> list:
    from rdkit import Chem

    pool = (folder / {"val": "valid.txt", "test": "test.txt"}[split]).read_text().splitlines()
    lines = map(int, (folder / f"subset_{split}.index").read_text().split(","))
    return [Chem.MolFromSmiles(pool[line]) for line in lines]


def test_computed_targets_agree_with_the_benchmarks_on_its_validation_molecules(shared_datasets):
    folder = shared_datasets / "zinc"
    rows = [line.split(",") for line in (folder / "subset_reference_targets.csv").read_text().splitlines()[1:]]
    reference = np.array([float(y) for split, position, _, y in rows if split == "val"])
    assert [int(position) for split, position, *_ in rows if split == "val"] == list(range(1000))
    computed = np.array([penalised_logp(molecule) for molecule in _subset(folder, "val")])
    error = np.abs(computed - reference)
    assert np.median(error) < 0.005 and (error < 0.05).mean() >= 0.97, (np.median(error), (error < 0.05).mean())


def test_the_longest_basis_cycle_is_the_benchmarks_networkx_computation(shared_datasets):
    import networkx
    from rdkit import Chem

    folder = shared_datasets / "zinc"
    for molecule in _subset(folder, "val") + _subset(folder, "test"):
        # The benchmark's own: networkx.Graph of the adjacency matrix of the canonical SMILES re-parsed.
        canonical = Chem.MolFromSmiles(Chem.MolToSmiles(molecule))
        cycles = networkx.cycle_basis(networkx.Graph(Chem.GetAdjacencyMatrix(canonical)))
        assert longest_basis_cycle(molecule) == max(map(len, cycles), default=0), Chem.MolToSmiles(molecule)


def test_the_ring_penalty_counts_the_basis_cycle_around_fused_rings():
    from rdkit import Chem

    assert longest_basis_cycle(Chem.MolFromSmiles("CCO")) == 0
    assert longest_basis_cycle(Chem.MolFromSmiles("C1CCCCCCC1.c1ccccc1")) == 8  # two separate rings
    assert longest_basis_cycle(Chem.MolFromSmiles("c1ccc2ccccc2c1")) == 6  # naphthalene: its two rings
    # Tropinone, a bridged bicyclic amine (rings of 5 and 6 atoms, and a 7-atom cycle around the bridge):
    # networkx's basis in the canonical order takes the 7-atom cycle, one unit of ring penalty.
    tropinone = Chem.MolFromSmiles("CN1C2CCC1CC(=O)C2")
    assert sorted(map(len, tropinone.GetRingInfo().AtomRings())) == [5, 6]
    assert longest_basis_cycle(tropinone) == 7


# --- the loader on a miniature folder --------------------------------------------------------------------------


def test_validation_and_test_are_the_subsets_with_the_reference_targets(tmp_path):
    data = load(write_folder(tmp_path / "zinc"))
    assert data.task == "graph_regression" and data.metric == "mae" and data.num_tasks == 1
    assert data.graph_ptr.numel() - 1 == 4 + 3 + 2
    assert data.train_mask.tolist() == [True] * 4 + [False] * 5
    assert data.val_mask.tolist() == [False] * 4 + [True] * 3 + [False] * 2
    assert data.y[data.val_mask, 0].tolist() == REFERENCE["val"]
    assert data.y[data.test_mask, 0].tolist() == REFERENCE["test"]
    atoms = np.diff(data.graph_ptr.numpy())
    assert atoms[4:].tolist() == [6, 2, 4, 2, 2]  # benzene, C[NH3+], OCCO; CN, CC
    assert data.x_cat_sizes == [7] and data.edge_attr_cat_sizes == [4] and data.x.shape == (int(atoms.sum()), 0)
    benzene = slice(int(data.graph_ptr[4]), int(data.graph_ptr[5]))
    assert data.x_cat[benzene, 0].tolist() == [0] * 6
    assert data.x_cat[int(data.graph_ptr[5]):int(data.graph_ptr[6]), 0].tolist() == [0, 5]  # C, N H3 +
    graph_of = np.searchsorted(data.graph_ptr.numpy(), data.edge_index.numpy(), side="right") - 1  # [2, E]
    assert (graph_of[0] == graph_of[1]).all()
    evaluated = graph_of[0] >= 4
    assert np.bincount(graph_of[0][evaluated] - 4).tolist() == [2 * 6, 2 * 1, 2 * 3, 2 * 1, 2 * 1]  # both ways
    assert sorted(data.edge_attr_cat[evaluated, 0].tolist()) == [1] * 18 + [2] * 6  # benzene: 3 double bonds


def test_the_stand_in_is_drawn_outside_the_validation_subset_by_its_own_seed(tmp_path):
    from rdkit import Chem

    folder = write_folder(tmp_path / "zinc")
    data = load(folder)
    assert data.notes["zinc_train_set"].startswith("stand-in: 4 molecules drawn (stand_in_seed=0) from JT-VAE's "
                                                   "valid.txt outside the validation subset")
    targets = {round(penalised_logp(Chem.MolFromSmiles(smiles)), 5): line for line, smiles in enumerate(VALID)}
    assert len(targets) == len(VALID)  # each molecule told apart by its target
    drawn = sorted(targets[round(value, 5)] for value in data.y[data.train_mask, 0].tolist())
    assert len(set(drawn)) == 4 and not set(drawn) & set(VAL_LINES)
    # The run's seed leaves the training set alone; stand_in_seed draws another.
    assert np.array_equal(load(folder, seed=7).y.numpy(), data.y.numpy())
    draws = {tuple(load(folder, stand_in_seed=value).y[:4, 0].tolist()) for value in range(6)}
    assert len(draws) > 1


def test_train_smiles_gives_the_benchmarks_own_training_molecules(tmp_path):
    from rdkit import Chem

    train, pool = tmp_path / "train.txt", ["CCCC", "CCOC", "CC(C)C", "OC=O", "c1ccoc1"]
    train.write_text("\n".join(pool) + "\n")
    data = load(write_folder(tmp_path / "zinc"), train_smiles=str(train))
    expected = [penalised_logp(Chem.MolFromSmiles(pool[line])) for line in TRAIN_LINES]
    assert data.y[:4, 0].tolist() == pytest.approx(expected, abs=1e-5)
    assert data.notes["zinc_train_set"].startswith("the benchmark's own: 4 molecules of JT-VAE's train.txt")
    with pytest.raises(DatasetError, match=r"line number 4 is outside .*train.txt, which has 3 lines"):
        train.write_text("CCCC\nCCOC\nCC(C)C\n")
        load(tmp_path / "zinc", train_smiles=str(train))


def test_a_missing_file_is_named(tmp_path):
    folder = write_folder(tmp_path / "zinc")
    (folder / "subset_val.index").unlink()
    with pytest.raises(DatasetError, match=r"not the ZINC benchmark's folder: subset_val.index missing"):
        load(folder)


def test_an_unparseable_smiles_names_its_file_and_line_or_is_skipped(tmp_path):
    folder = write_folder(tmp_path / "zinc", valid=[*VALID[:3], "C[NH3+", *VALID[4:]])  # line 4: val position 1
    with pytest.raises(DatasetError, match=r"valid.txt line 4: SMILES 'C\[NH3\+' is not valid SMILES syntax"):
        load(folder)
    data = load(folder, skip_invalid=True)
    assert data.val_mask.sum() == 2 and data.y[data.val_mask, 0].tolist() == [0.5, 2.0]
    assert data.notes["zinc_skipped"].startswith("1 of 9 molecules that RDKit cannot parse (first: valid.txt line 4")


def test_an_atom_outside_the_vocabulary_is_named(tmp_path):
    folder = write_folder(tmp_path / "zinc", valid=[*VALID[:5], "OCCS", *VALID[6:]])
    with pytest.raises(DatasetError, match=r"valid.txt line 6: atom type 'S' is not in the benchmark's vocabulary"):
        load(folder)


def test_reference_targets_that_do_not_match_the_subset_are_refused(tmp_path):
    folder = write_folder(tmp_path / "zinc")
    (folder / "subset_val.index").write_text("1,3,6")
    with pytest.raises(DatasetError, match=r"subset_reference_targets.csv: line 4 names a different molecule"):
        load(folder)


def test_an_index_outside_its_pool_is_refused(tmp_path):
    folder = write_folder(tmp_path / "zinc")
    (folder / "subset_test.index").write_text("2,4")
    with pytest.raises(DatasetError, match=r"subset_test.index: line number 4 is outside test.txt, which has 4 lines"):
        load(folder)


@pytest.mark.slow
def test_the_whole_benchmark_loads(shared_datasets):
    folder = shared_datasets / "zinc"
    data = load(folder)
    assert [int(mask.sum()) for mask in (data.train_mask, data.val_mask, data.test_mask)] == [10_000, 1_000, 1_000]
    rows = [line.split(",") for line in (folder / "subset_reference_targets.csv").read_text().splitlines()[1:]]
    reference = np.array([float(y) for *_, y in rows], dtype=np.float32)
    assert np.array_equal(data.y[~data.train_mask, 0].numpy(), reference)
    assert data.x_cat_sizes == [28] and int(data.x_cat.max()) < 28
    assert "stand-in: 10,000 molecules" in data.notes["zinc_train_set"]
