"""Every line of a fenced code block in docs/ fits the site's code-block width, so that no block scrolls
sideways and no trailing `# comment` is cut off.

Where MAX_LINE = 80 comes from: the built site (`mkdocs build`) measured with headless Chromium (Debian's
chromium driven by Playwright), every `pre > code` element of every page. At 1280×800 and at 1440×800 a code
block's text area is 656 px wide (Material's 61rem grid less the navigation and the table-of-contents
sidebars, both shown from 1220 px) and a monospace character 8.18 px wide (13.6 px type, DejaVu Sans Mono,
0.602 em like Menlo; 0.6 em for Liberation Mono, 0.55 em for Consolas): 80.2 characters fit. From 1600 px
Material scales the root font size, so the area and the character grow together and 80 still fit; narrower
windows hide the table of contents first (87 fit at 1024 px). A line of 80 characters showed no overflow;
an 81st character scrolls. A block indented into a list or an admonition is narrower still.

docs/results/ (measurements, written by the benchmarks) and docs/reference/ (the API reference, generated
from docstrings) are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
MAX_LINE = 80
NOT_CHECKED = {"results", "reference"}
# An opening or closing code fence: three or more backticks or tildes, after any indentation.
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})")


def pages() -> list[Path]:
    """The Markdown pages of docs/ that are checked."""
    return sorted(path for path in DOCS.rglob("*.md") if path.relative_to(DOCS).parts[0] not in NOT_CHECKED)


def code_lines(text: str):
    """(line number, line less the fence's indentation) for each line inside a fenced code block of `text`."""
    fence = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence = (match["indent"], match["fence"])
            continue
        indent, opening = fence
        if (match and match["fence"][0] == opening[0] and len(match["fence"]) >= len(opening)
                and not line[match.end():].strip()):
            fence = None
        else:
            yield number, line.removeprefix(indent)


def test_code_lines_are_found_inside_fences_only():
    # A fence closes only with the same character, at least as many times, and nothing after it.
    text = "prose\n````markdown\n```bash\n~~~\n```` no\n````\nout\n~~~\nin two\n~~~\n"
    assert list(code_lines(text)) == [(3, "```bash"), (4, "~~~"), (5, "```` no"), (9, "in two")]
    assert list(code_lines("- item\n\n    ```\n    indented\n    ```\nout\n")) == [(4, "indented")]


def test_code_block_lines_fit_the_site():
    checked = pages()
    assert checked and not {path.relative_to(DOCS).parts[0] for path in checked} & NOT_CHECKED
    too_long = [f"{path.relative_to(REPO)}:{number}: {len(line)} characters"
                for path in checked for number, line in code_lines(path.read_text()) if len(line) > MAX_LINE]
    assert not too_long, (f"code-block lines longer than {MAX_LINE} characters scroll sideways on the site: "
                          "wrap them (a comment above its command, ` \\` continuations, breaks inside "
                          "brackets):\n" + "\n".join(too_long))
