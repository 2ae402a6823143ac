"""The documentation: the site builds strictly, its API reference renders maths and documents each object
once, the README stays short and its links resolve, and the results index names every results file.

`mkdocs build --strict` fails on a broken link or anchor, a page missing from the nav, a module the API
reference cannot render, a docstring parameter the signature lacks or that has no type, and a formula that
cannot be rendered (docs/hooks/maths.py), so building the site here makes CI catch them (`make docs` is the
same build). What a warning cannot say is checked on the built pages: no reST markup left as text, maths
rendered as MathML, no object documented twice.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
# The README gets a user running and points at the site (docs/); the rest lives there.
README_MAX_LINES = 200
# [text](target) outside code spans; the target up to a space, ')' or '#'.
MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]+)(?:#[^)]*)?\)")
# reST that Markdown shows as text: a directive opening a paragraph (`.. math::`) or a role (:func:`name`, whose
# backticks the build has made a <code> element). Either named inside code is a mention, not markup.
REST_MARKUP = re.compile(r"(?:^|<p>)\s*\.\. [a-z-]+::|:(?:func|class|meth|mod|attr|obj|exc|data|math|ref):(?:`|<code>)",
                         re.MULTILINE)
# pymdownx.arithmatex's wrapper of one formula, which docs/hooks/maths.py fills with MathML.
FORMULA = re.compile(r'<(span|div) class="arithmatex">(.*?)</\1>', re.DOTALL)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """One strict build for every test of the built pages: the build, and the folder it wrote."""
    # Not skipped without MkDocs: CI installs the [dev] extra, which includes [docs], and a skip would let a
    # broken link through unnoticed.
    assert importlib.util.find_spec("mkdocs") is not None, "mkdocs is not installed: pip install -e '.[dev]' (make setup)"
    folder = tmp_path_factory.mktemp("docs") / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    return result, folder


def test_the_site_builds_strictly(site):
    result, folder = site
    problems = [line for line in result.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert result.returncode == 0, "mkdocs build --strict failed:\n" + ("\n".join(problems) or result.stderr[-4000:])
    assert (folder / "reference" / "models" / "index.html").is_file()


def test_the_reference_shows_no_rest_markup_and_renders_its_maths(site):
    pages = _reference_pages(site)
    raw = {name: sorted(set(REST_MARKUP.findall(_text(html)))) for name, html in pages.items()}
    raw = {name: found for name, found in raw.items() if found}
    assert not raw, (f"reST markup shown as text on {raw}: write maths as \\( ... \\) or \\[ ... \\] and links as "
                     "[name][dotted.path] (docs/reference/index.md)")
    unrendered = {name: [body[:80] for _tag, body in FORMULA.findall(html) if "<math" not in body]
                  for name, html in pages.items()}
    unrendered = {name: found for name, found in unrendered.items() if found}
    assert not unrendered, f"formulas left as LaTeX (docs/hooks/maths.py did not run?): {unrendered}"
    # The models page holds most of the formulas: if none is MathML, the maths pipeline is off altogether.
    assert "<math" in pages["models"], "no MathML on the models page: is pymdownx.arithmatex in mkdocs.yml?"


def test_no_page_loads_anything_from_elsewhere(site):
    # The site works offline and as plain files: maths is MathML made at build time, not a CDN's script, and
    # the fonts are the system's (theme.font: false), not Google's.
    _result, folder = site
    remote = {str(path.relative_to(folder)): found for path in sorted(folder.rglob("*.html"))
              if (found := re.findall(r'<(?:script|link)[^>]*\s(?:src|href)="(?:https?:)?//[^"]*"[^>]*>',
                                      path.read_text()))}
    remote = {page: [tag for tag in tags if 'rel="canonical"' not in tag] for page, tags in remote.items()}
    remote = {page: tags for page, tags in remote.items() if tags}
    assert not remote, f"pages load scripts or stylesheets from other hosts: {remote}"


def test_each_object_is_documented_once(site):
    """No id twice on a page, and no object under two paths (a package's re-export and its own module's)."""
    import griffe  # mkdocstrings-python's loader, in the [docs] extra like MkDocs

    headings = {}  # object heading id -> reference page
    for name, html in _reference_pages(site).items():
        parser = _Ids()
        parser.feed(html)
        repeated = [found for found, count in Counter(parser.ids).items() if count > 1]
        assert not repeated, f"reference/{name}: ids used more than once: {repeated[:10]}"
        for heading in parser.headings:
            assert heading not in headings, f"{heading} is documented on reference/{headings[heading]} and {name}"
            headings[heading] = name
    packages = {package: griffe.load(package, search_paths=[str(REPO)], resolve_aliases=True,
                                     resolve_external=False) for package in ("sgt_core", "flows")}
    by_object: dict[str, list[str]] = {}
    for heading in headings:
        found = _griffe_object(packages, heading)
        if found is not None:
            by_object.setdefault(found.final_target.path if found.is_alias else found.path, []).append(heading)
    twice = {path: paths for path, paths in by_object.items() if len(paths) > 1}
    assert not twice, f"objects documented under more than one path (docs/hooks/reexports.py): {twice}"


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


def _reference_pages(site) -> dict[str, str]:
    """The HTML of each API reference page by name (models, flows, ...), from a build that passed."""
    result, folder = site
    assert result.returncode == 0, "the site did not build (see test_the_site_builds_strictly)"
    return {path.parent.name: path.read_text() for path in sorted((folder / "reference").glob("*/index.html"))}


def _text(html: str) -> str:
    """The page's text outside <pre> blocks and the maths' LaTeX annotations, tags left in place."""
    html = re.sub(r"<pre.*?</pre>", "", html, flags=re.DOTALL)
    return re.sub(r"<annotation.*?</annotation>", "", html, flags=re.DOTALL)


class _Ids(HTMLParser):
    """Every id attribute of a page, and those of mkdocstrings' object headings."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.headings: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.append(values["id"])
            if "doc-heading" in (values.get("class") or "").split():
                self.headings.append(values["id"])


def _griffe_object(packages: dict, path: str):
    """The griffe object (or alias) at a dotted path, or None where the path names no object."""
    root, *parts = path.split(".")
    found = packages.get(root)
    for part in parts:
        if found is None or part not in found.members:
            return None
        found = found.members[part]
    return found
