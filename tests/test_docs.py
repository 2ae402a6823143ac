"""The documentation: the site builds strictly, the README stays short and its links resolve, and the results
index names every results file.

`mkdocs build --strict` fails on a broken link or anchor, a page missing from the nav and a module the API
reference cannot render, so building the site here makes CI catch them (`make docs` is the same build).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
# The README gets a user running and points at the site (docs/); the rest lives there.
README_MAX_LINES = 200
# [text](target) outside code spans; the target up to a space, ')' or '#'.
MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]+)(?:#[^)]*)?\)")


def test_the_site_builds_strictly(tmp_path):
    # Not skipped without MkDocs: CI installs the [dev] extra, which includes [docs], and a skip would let a
    # broken link through unnoticed.
    assert importlib.util.find_spec("mkdocs") is not None, "mkdocs is not installed: pip install -e '.[dev]' (make setup)"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    problems = [line for line in result.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert result.returncode == 0, "mkdocs build --strict failed:\n" + ("\n".join(problems) or result.stderr[-4000:])
    assert (tmp_path / "site" / "reference" / "models" / "index.html").is_file()


def test_the_readme_is_short_and_its_links_resolve():
    text = (REPO / "README.md").read_text()
    lines = text.count("\n")
    assert lines <= README_MAX_LINES, (f"README.md has {lines} lines, more than {README_MAX_LINES}: move the detail to "
                                       "a page of docs/ and link it")
    missing = [target for target in MARKDOWN_LINK.findall(_without_code(text))
               if "://" not in target and not (REPO / target).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_results_index_names_every_results_file():
    index = (RESULTS / "README.md").read_text()
    listed = set(MARKDOWN_LINK.findall(index))
    unlisted = sorted(path.name for path in RESULTS.iterdir() if path.name != "README.md" and path.name not in listed)
    assert not unlisted, f"benchmarks/results/README.md has no line for {unlisted}: add one (what, which machine)"
    gone = sorted(name for name in listed if not (RESULTS / name).exists())
    assert not gone, f"benchmarks/results/README.md lists files that do not exist: {gone}"


def _without_code(markdown: str) -> str:
    """The text outside fenced code blocks and code spans, where links are links."""
    markdown = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", markdown)
