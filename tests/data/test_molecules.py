"""The SMILES CSV loader: OGB's features, label parsing and task inference, the three splits, bad rows."""

import gzip
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from sgt_core.data import load_dataset
from sgt_core.data.molecule_splits import scaffold_split, scaffolds
from sgt_core.data.molecules import ogb_features
from sgt_core.errors import ConfigError, DatasetError

# Ten molecules of different sizes; rows 0-4 and 5-9 each hold classes 0 and 1.
SMILES = ["CCO", "c1ccccc1O", "CC(=O)[O-]", "C[NH3+]", "c1ccncc1C", "CC#N", "C[C@@H](N)C(=O)O", "ClCCBr", "C1CCCCC1",
          "O=C1CCCN1"]


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    lines = [",".join(header)] + [",".join(row) for row in rows]
    text = "\n".join(lines) + "\n"
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def load(path: Path, seed: int = 0, **keys):
    config = {"name": "molecules", "path": str(path), "label_columns": ["y"], "split": "random",
              "split_fractions": {"train": 0.6, "val": 0.2, "test": 0.2}, **keys}
    return load_dataset(config, seed=seed)


def classes_csv(tmp_path: Path, smiles=SMILES, name="mols.csv") -> Path:
    return write_csv(tmp_path / name, ["smiles", "y"], [[s, str(i % 2)] for i, s in enumerate(smiles)])


# --- OGB's featurisation -----------------------------------------------------------------------------------


def _assert_like_smiles2graph(smiles: list[str]):
    from ogb.utils import smiles2graph
    from rdkit import Chem

    graph_ptr, edge_index, atoms, bonds = ogb_features([Chem.MolFromSmiles(text) for text in smiles])
    for graph, text in enumerate(smiles):
        expected = smiles2graph(text)  # each bond in both directions, in bond order
        first, last = int(graph_ptr[graph]), int(graph_ptr[graph + 1])
        assert np.array_equal(atoms[first:last], expected["node_feat"]), text
        mine = (edge_index[0] >= first) & (edge_index[0] < last)
        assert np.array_equal(edge_index[:, mine] - first, expected["edge_index"][:, ::2]), text
        assert np.array_equal(bonds[mine], expected["edge_feat"][::2]), text


def test_features_are_smiles2graphs_on_hand_made_molecules():
    _assert_like_smiles2graph([*SMILES, "[Na+].[Cl-]", "C/C=C/C", "[2H]C", "c1ccc2[nH]ccc2c1", "O=S(=O)(O)O", "[Cu]"])


def test_features_are_smiles2graphs_on_molhiv(shared_datasets):
    rows = (shared_datasets / "molhiv" / "HIV.csv").read_text().splitlines()[1:]
    _assert_like_smiles2graph([row.split(",")[0] for row in rows[200:400]])


# --- labels and tasks ------------------------------------------------------------------------------------------


def test_one_integer_column_is_binary_classification_scored_by_roc_auc(tmp_path):
    data = load(classes_csv(tmp_path))
    assert data.task == "graph_classification" and data.num_classes == 2 and data.metric == "roc_auc"
    assert data.y.tolist() == [i % 2 for i in range(10)] and data.graph_ptr.numel() == 11
    assert data.x_cat.shape[1] == 9 and data.x_cat_sizes == [119, 5, 12, 12, 10, 6, 6, 2, 2]
    assert data.edge_attr_cat.shape[1] == 3 and data.edge_attr_cat_sizes == [5, 6, 2]
    assert np.diff(data.graph_ptr.numpy()).tolist()[:4] == [3, 7, 4, 2]


def test_several_zero_one_columns_are_multilabel_with_empty_cells_unknown(tmp_path):
    rows = [[s, str(i % 2), "" if i == 3 else str((i // 2) % 2)] for i, s in enumerate(SMILES)]
    path = write_csv(tmp_path / "mols.csv.gz", ["smiles", "a", "b"], rows)
    data = load(path, label_columns=["a", "b"])
    assert data.task == "graph_multilabel" and data.metric == "ap" and data.num_tasks == 2
    assert np.isnan(data.y[3, 1]) and data.y[:, 0].tolist() == [i % 2 for i in range(10)]


def test_a_list_column_is_multilabel(tmp_path):
    rows = [[s, f'"[{i % 2}, {1 - i % 2}, {(i // 3) % 2}]"'] for i, s in enumerate(SMILES)]
    data = load(write_csv(tmp_path / "mols.csv", ["smiles", "labels"], rows), label_columns=["labels"])
    assert data.task == "graph_multilabel" and data.y.shape == (10, 3)
    assert data.y[4].tolist() == [0.0, 1.0, 1.0]


def test_floats_are_regression_and_an_explicit_task_and_metric_are_kept(tmp_path):
    rows = [[s, f"{0.5 * i - 1:.2f}"] for i, s in enumerate(SMILES)]
    data = load(write_csv(tmp_path / "mols.csv", ["smiles", "y"], rows))
    assert data.task == "graph_regression" and data.metric == "mae" and data.y[:, 0].tolist() == pytest.approx(
        [0.5 * i - 1 for i in range(10)])
    data = load(classes_csv(tmp_path), task="graph_multilabel", metric="roc_auc")
    assert data.task == "graph_multilabel" and data.metric == "roc_auc" and data.y.shape == (10, 1)


# --- splits ----------------------------------------------------------------------------------------------------


def test_the_random_split_follows_split_seed_not_the_run_seed(tmp_path):
    path = classes_csv(tmp_path)
    first = load(path)
    assert [int(mask.sum()) for mask in (first.train_mask, first.val_mask, first.test_mask)] == [6, 2, 2]
    assert np.array_equal(load(path, seed=5).train_mask, first.train_mask)
    masks = {tuple(load(path, split_seed=value).train_mask.tolist()) for value in range(5)}
    assert len(masks) > 1
    assert first.notes["molecules_split"] == "random 60/20/20 (split_seed=0)"


# Six scaffold groups, rows interleaved: benzene 8, pyridine 6, cyclohexane 2, cyclopentane 2 (its first row
# after cyclohexane's), acyclic 1, naphthalene 1.
SCAFFOLD_ROWS = [
    ("c1ccccc1C", "c1ccccc1"), ("c1ccncc1C", "c1ccncc1"), ("C1CCCCC1C", "C1CCCCC1"), ("c1ccccc1CC", "c1ccccc1"),
    ("C1CCCC1C", "C1CCCC1"), ("c1ccccc1O", "c1ccccc1"), ("c1ccncc1CC", "c1ccncc1"), ("CCO", ""),
    ("c1ccccc1N", "c1ccccc1"), ("c1ccncc1O", "c1ccncc1"), ("C1CCCCC1O", "C1CCCCC1"), ("c1ccccc1Cl", "c1ccccc1"),
    ("c1ccncc1N", "c1ccncc1"), ("C1CCCC1O", "C1CCCC1"), ("c1ccccc1F", "c1ccccc1"), ("c1ccncc1Cl", "c1ccncc1"),
    ("c1ccc2ccccc2c1C", "c1ccc2ccccc2c1"), ("c1ccccc1CO", "c1ccccc1"), ("c1ccncc1F", "c1ccncc1"),
    ("c1ccccc1CN", "c1ccccc1"),
]


def test_scaffold_split_keeps_each_scaffold_in_one_split_largest_groups_to_train():
    from rdkit import Chem

    smiles, expected_scaffolds = zip(*SCAFFOLD_ROWS, strict=True)
    scaffold_of = scaffolds([Chem.MolFromSmiles(text) for text in smiles])
    assert scaffold_of == list(expected_scaffolds)
    part = scaffold_split(scaffold_of, np.array([0.8, 0.1, 0.1]))
    by_scaffold = {scaffold: set(part[np.array(scaffold_of) == scaffold].tolist()) for scaffold in scaffold_of}
    assert all(len(parts) == 1 for parts in by_scaffold.values())  # no scaffold straddles two splits
    # 20 molecules, train up to 16, train and val up to 18: benzene (8), pyridine (6) and, of the two groups
    # of two, cyclopentane (its first molecule comes later) fill train; cyclohexane goes to val; the
    # acyclic molecule and naphthalene fit neither and go to test.
    assert {scaffold: parts.pop() for scaffold, parts in by_scaffold.items()} == {
        "c1ccccc1": 0, "c1ccncc1": 0, "C1CCCC1": 0, "C1CCCCC1": 1, "": 2, "c1ccc2ccccc2c1": 2}


def test_the_scaffold_split_through_the_loader_says_it_was_computed_here(tmp_path):
    rows = [[smiles, str(i % 2)] for i, (smiles, _) in enumerate(SCAFFOLD_ROWS)]
    data = load(write_csv(tmp_path / "mols.csv", ["smiles", "y"], rows), split="scaffold",
                split_fractions={"train": 0.8, "val": 0.1, "test": 0.1})
    assert [int(mask.sum()) for mask in (data.train_mask, data.val_mask, data.test_mask)] == [16, 2, 2]
    assert data.notes["molecules_split"].startswith("scaffold split computed here, not OGB's official split file")


def test_the_split_file_gives_the_rows(tmp_path):
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"train": [0, 1, 2, 3, 4, 5], "val": [6, 7], "test": [9]}))
    data = load(classes_csv(tmp_path), split="file", split_file=str(split))
    assert np.flatnonzero(data.val_mask.numpy()).tolist() == [6, 7] and data.test_mask.tolist() == [False] * 9 + [True]
    assert not bool(data.train_mask[8] | data.val_mask[8] | data.test_mask[8])  # row 8 is in no split


@pytest.mark.parametrize("stored, message", [
    ({"train": [0, 1, 2, 3], "val": [4, 10], "test": [5]}, r"val lists row 10, outside the 10 data rows of"),
    ({"train": [0, 1, 2, 3], "val": [4, 5], "test": [5]}, r"row 5 is in both val and test"),
    ({"train": [0, 1, 1, 3], "val": [4], "test": [5]}, r"train lists row 1 twice"),
    ({"train": [0, 1], "valid": [4], "test": [5]}, (r"expected an object with the keys train, val, test .* found "
                                                   r"\['test', 'train', 'valid'\]")),
    ({"train": [0, 1.5], "val": [4], "test": [5]}, r"train must be a list of integer rows; it holds 1.5"),
])
def test_a_bad_split_file_is_named_with_the_problem(tmp_path, stored, message):
    split = tmp_path / "split.json"
    split.write_text(json.dumps(stored))
    with pytest.raises(DatasetError, match=f"{split}: {message}"):
        load(classes_csv(tmp_path), split="file", split_file=str(split))


# --- bad input -----------------------------------------------------------------------------------------------


def test_an_unparseable_smiles_names_the_file_row_and_reason_and_writes_nothing(tmp_path):
    path = classes_csv(tmp_path, [*SMILES[:2], "C1CC", *SMILES[3:]])
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(DatasetError, match=rf"{path}: row 2 \(0-based; line 4\): SMILES 'C1CC' is not valid SMILES "
                                           r"syntax; fix or remove it, or set dataset.skip_invalid=true"):
        load(path)
    assert sorted(tmp_path.rglob("*")) == before


def test_a_valence_error_is_named_too(tmp_path):
    path = classes_csv(tmp_path, [*SMILES[:4], "C[N](C)(C)(C)C", *SMILES[5:]])
    with pytest.raises(DatasetError, match=r"row 4 \(0-based; line 6\): SMILES 'C\[N\]\(C\)\(C\)\(C\)C' is not a "
                                           r"valid molecule \(Explicit valence for atom # 1 N"):
        load(path)


def test_skip_invalid_skips_and_logs_how_many_and_which(tmp_path, caplog):
    path = write_csv(tmp_path / "mols.csv", ["smiles", "y"],
                     [[s, str(i % 2)] for i, s in enumerate([*SMILES, "C1CC", "", "CCO"])])
    with caplog.at_level(logging.WARNING):
        data = load(path, skip_invalid=True)
    assert data.graph_ptr.numel() - 1 == 11 and data.y.tolist() == [i % 2 for i in range(10)] + [0]
    assert "skipped 2 of 13 molecules that RDKit cannot parse (first: row 10 (0-based; line 12); row 11" in caplog.text
    assert data.notes["molecules_skipped"].startswith("2 of 13 molecules")


def test_skipping_every_molecule_leaves_nothing_to_load(tmp_path):
    path = classes_csv(tmp_path, ["C1CC", "", "N(", "Q"])
    with pytest.raises(DatasetError, match=r"no molecule to load: RDKit parses none of its 4 SMILES"):
        load(path, skip_invalid=True)


def test_a_file_without_smiles_says_so(tmp_path):
    path = classes_csv(tmp_path, [])
    with pytest.raises(DatasetError, match=r"mols\.csv: no molecule to load: it holds no SMILES \(no rows below its"):
        load(path)


def test_a_missing_smiles_is_named(tmp_path):
    path = classes_csv(tmp_path, [*SMILES[:3], "", *SMILES[4:]])
    with pytest.raises(DatasetError, match=r"row 3 \(0-based; line 5\): the SMILES is missing"):
        load(path)


@pytest.mark.parametrize("keys, message", [
    ({"smiles_column": "SMILES"}, (r"no column 'SMILES' \(dataset.smiles_column\); the file's columns are 'smiles', "
                                  r"'y'")),
    ({"label_columns": ["y", "active"]}, r"no column 'active' \(dataset.label_columns\); the file's columns are "),
])
def test_a_missing_column_lists_the_columns_found(tmp_path, keys, message):
    with pytest.raises(DatasetError, match=message):
        load(classes_csv(tmp_path), **keys)


def test_a_label_that_is_not_a_number_is_named(tmp_path):
    path = write_csv(tmp_path / "mols.csv", ["smiles", "y"], [[s, "yes" if i == 7 else "1"] for i, s in
                                                             enumerate(SMILES)])
    with pytest.raises(DatasetError, match=r"row 7 \(0-based; line 9\): column 'y' holds 'yes', not a finite number"):
        load(path)


def test_a_list_label_of_another_length_is_named(tmp_path):
    rows = [[s, '"[0, 1]"' if i == 5 else '"[0, 1, 1]"'] for i, s in enumerate(SMILES)]
    with pytest.raises(DatasetError, match=r"row 5 \(0-based; line 7\): column 'labels' holds '\[0, 1\]', not a list "
                                           r"of 3 numbers"):
        load(write_csv(tmp_path / "mols.csv", ["smiles", "labels"], rows), label_columns=["labels"])


def test_classification_needs_a_label_for_every_molecule(tmp_path):
    path = write_csv(tmp_path / "mols.csv", ["smiles", "y"], [[s, "" if i == 6 else str(i % 2)]
                                                             for i, s in enumerate(SMILES)])
    with pytest.raises(DatasetError, match=r"row 6 \(0-based; line 8\): no label; graph_classification needs"):
        load(path, task="graph_classification")


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(DatasetError, match=rf"{tmp_path / 'absent.csv'}: file not found"):
        load(tmp_path / "absent.csv")


@pytest.mark.parametrize("keys, message", [
    ({"split": "file"}, "dataset.split=file needs dataset.split_file"),
    ({"split_file": "s.json"}, "dataset.split_file is read only with dataset.split=file"),
    ({"split": "stratified"}, "dataset.split must be one of random, scaffold, file; found 'stratified'"),
    ({"task": "node_classification"}, "dataset.task must be null .* or one of graph_classification"),
    ({"split_fractions": {"train": 0.9, "val": 0.1, "test": 0.1}}, "dataset.split_fractions must sum to at most 1"),
])
def test_bad_keys_are_config_errors(tmp_path, keys, message):
    with pytest.raises(ConfigError, match=message):
        load(classes_csv(tmp_path), **keys)


# --- the real files --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_molhivs_scaffold_split_is_80_10_10_within_a_molecule(shared_datasets):
    from rdkit import Chem, rdBase

    rows = (shared_datasets / "molhiv" / "HIV.csv").read_text().splitlines()[1:]
    with rdBase.BlockLogs():
        molecules = [Chem.MolFromSmiles(row.split(",")[0]) for row in rows]
    molecules = [molecule for molecule in molecules if molecule is not None]  # 7 fail with this RDKit
    part = scaffold_split(scaffolds(molecules), np.array([0.8, 0.1, 0.1]))
    counts = np.bincount(part, minlength=3)
    assert np.abs(counts - np.array([0.8, 0.1, 0.1]) * len(molecules)).max() <= 1.0, counts


@pytest.mark.slow
def test_the_presets_dataset_overrides_load(shared_datasets):
    hiv = load_dataset({"name": "molecules", "path": str(shared_datasets / "molhiv" / "HIV.csv"),
                        "label_columns": ["HIV_active"], "split": "scaffold", "metric": "roc_auc",
                        "skip_invalid": True}, seed=0)
    assert hiv.task == "graph_classification" and hiv.num_classes == 2 and hiv.graph_ptr.numel() - 1 == 41_120
    folder = shared_datasets / "peptides-func"
    peptides = load_dataset({"name": "molecules", "path": str(folder / "peptide_multi_class_dataset.csv.gz"),
                             "label_columns": ["labels"], "task": "graph_multilabel", "metric": "ap",
                             "split": "file", "split_file": str(folder / "splits_random_stratified_peptide.json")},
                            seed=0)
    assert peptides.num_tasks == 10 and [int(m.sum()) for m in (peptides.train_mask, peptides.val_mask,
                                                                peptides.test_mask)] == [10_873, 2_331, 2_331]
