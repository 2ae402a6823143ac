"""RDKit's Contrib synthetic-accessibility scorer, its fragment scores read from their file without unpickling.

`sascorer.py` (Ertl and Schuffenhauer 2009) ships inside the rdkit wheel, not as an importable package, and
reads its fragment scores with `pickle.load`. Unpickling can run arbitrary code, and this project never
unpickles: the file is a protocol-0 pickle, a text of one opcode a line, holding only a list of lists
[score, fragment id, fragment id, ...]; it is read here as text, every line checked against that grammar,
and handed to the scorer before it would load the file itself.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np

from sgt_core.errors import DatasetError

FRAGMENT_SCORES_FILE = "fpscores.pkl.gz"


def contrib_folder() -> Path:
    """rdkit/Contrib/SA_Score inside the installed rdkit wheel."""
    from rdkit.Chem import RDConfig

    return Path(RDConfig.RDContribDir) / "SA_Score"


def read_fragment_scores(path: Path) -> dict[int, float]:
    """Fragment id -> score from the protocol-0 pickle text at `path`, executing nothing from it.

    Each line holds one opcode and its argument, after any number of APPENDs ('a', which add the value
    before them to the open list): `(lpN` opens a list (MARK, LIST, PUT to memo N), `F<float>` pushes a
    list's score, `I<int>` a fragment id of that score, and `.` ends the file. Any other line is refused.

    Raises:
        DatasetError: If the file is missing or holds anything but that grammar.
    """
    try:
        text = gzip.decompress(path.read_bytes())
    except OSError as error:
        raise DatasetError(f"{path}: cannot read RDKit's SA fragment scores ({error})") from error
    lines = np.array(text.rstrip(b"\n").split(b"\n"))  # bytes [L]
    opcodes = np.char.lstrip(lines, b"a")  # the APPENDs carry no argument
    head = opcodes.astype("S1")  # [L] each line's opcode
    opens = np.char.startswith(opcodes, b"(lp") & np.char.isdigit(np.char.lstrip(opcodes, b"(lp"))
    is_float, is_int, is_end = head == b"F", head == b"I", opcodes == b"."
    valid = opens | is_float | is_int | is_end
    if not valid.all() or not is_end[-1] or is_end[:-1].any():
        line = int(np.flatnonzero(~valid)[0]) + 1 if not valid.all() else lines.size
        raise DatasetError(f"{path}: line {line} is not a list, score, fragment id or end of the expected "
                           f"protocol-0 list of lists (found {bytes(lines[line - 1][:40])!r}); not read further")
    try:
        scores = np.char.lstrip(opcodes[is_float], b"F").astype(np.float64)  # [S]
        fragments = np.char.lstrip(opcodes[is_int], b"I").astype(np.int64)  # [I]
    except ValueError as error:
        raise DatasetError(f"{path}: a score or fragment id is not a number ({error})") from error
    # A fragment id belongs to the score most recently pushed before it.
    score_of_line = np.cumsum(is_float) - 1  # [L]
    owners = score_of_line[is_int]
    if owners.size and owners.min() < 0:
        raise DatasetError(f"{path}: a fragment id comes before any score")
    return dict(zip(fragments.tolist(), scores[owners].tolist()))


@functools.cache
def sa_scorer() -> ModuleType:
    """RDKit's Contrib `sascorer` module, loaded from the rdkit wheel with its fragment scores in place.

    Loaded once per process: reading its 705,292 fragment scores is the slow part.
    """
    folder = contrib_folder()
    spec = importlib.util.spec_from_file_location("sgt_sascorer", folder / "sascorer.py")
    if spec is None or spec.loader is None:
        raise DatasetError(f"{folder / 'sascorer.py'}: RDKit's SA scorer is missing from the rdkit installation")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # calculateScore reads the scores from the module global when it is set, and unpickles the file if not.
    module._fscores = read_fragment_scores(folder / FRAGMENT_SCORES_FILE)
    return module


def synthetic_accessibility(molecule) -> float:
    """The SA score of an RDKit molecule, 1 (easy to make) to 10 (hard), as `sascorer.calculateScore`."""
    return sa_scorer().calculateScore(molecule)
