"""RDKit's SA scorer with its fragment scores read as text: the same scores, the scorer's own reference values."""

import gzip
import pickletools

import pytest

from sgt_core.data.sa_score import FRAGMENT_SCORES_FILE, contrib_folder, read_fragment_scores, sa_scorer
from sgt_core.errors import DatasetError


def test_the_text_reading_gives_what_the_pickle_opcodes_say():
    path = contrib_folder() / FRAGMENT_SCORES_FILE
    # pickletools.genops disassembles the opcodes without building any object: an independent decoder.
    expected, score = {}, None
    for opcode, argument, _ in pickletools.genops(gzip.decompress(path.read_bytes())):
        assert opcode.name in ("MARK", "LIST", "PUT", "FLOAT", "INT", "APPEND", "STOP"), opcode.name
        if opcode.name == "FLOAT":
            score = argument
        elif opcode.name == "INT":
            expected[argument] = score
    assert read_fragment_scores(path) == expected and len(expected) > 700_000


def test_the_scorer_reproduces_its_published_scores():
    from rdkit import Chem

    rows = (contrib_folder() / "data" / "zim.100.txt").read_text().splitlines()[1:]
    scorer = sa_scorer()
    for row in rows:
        smiles, _, score = row.split("\t")
        assert scorer.calculateScore(Chem.MolFromSmiles(smiles)) == pytest.approx(float(score), abs=1e-3), smiles


def test_a_pickle_that_would_run_code_is_refused(tmp_path):
    # Protocol 0 for os.system("echo hi"): GLOBAL, then REDUCE; read as text, its second line is refused.
    path = tmp_path / "scores.pkl.gz"
    path.write_bytes(gzip.compress(b"(lp0\ncos\nsystem\n(S'echo hi'\ntR.\n"))
    with pytest.raises(DatasetError, match="line 2 is not a list, score, fragment id or end"):
        read_fragment_scores(path)


def test_a_fragment_id_before_any_score_is_refused(tmp_path):
    path = tmp_path / "scores.pkl.gz"
    path.write_bytes(gzip.compress(b"(lp0\n(lp1\nI12\naF1.5\naa.\n"))
    with pytest.raises(DatasetError, match="fragment id comes before any score"):
        read_fragment_scores(path)
