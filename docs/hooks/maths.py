r"""MkDocs hook: the site's maths as MathML, made at build time.

pymdownx.arithmatex in generic mode (mkdocs.yml) only marks each formula of a page or a docstring: a span
(inline, `\( ... \)`) or a div (a block, `\[ ... \]` or `$$ ... $$`) of class "arithmatex" holding the
LaTeX. This hook replaces the LaTeX with math-core's MathML Core, which current browsers render natively,
so the site needs no MathJax or KaTeX script and no font from a CDN: it works offline and as plain files.
A formula math-core cannot read (an unknown command, an unclosed brace) is a build warning, so
`mkdocs build --strict` fails on it rather than showing raw LaTeX.
"""

from __future__ import annotations

import html
import re

from math_core import LatexError, LatexToMathML
from mkdocs.plugins import get_plugin_logger

log = get_plugin_logger(__name__)

# arithmatex's generic output: the tag, then the HTML-escaped LaTeX between \( \) (inline) or \[ \] (block).
FORMULA = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">\\(?P<open>[(\[])(?P<latex>.*?)\\[)\]]</(?P=tag)>', re.DOTALL
)
# fancy_error=False: one-line messages, readable in the build log. annotation=True keeps the LaTeX in the
# MathML (<annotation encoding="application/x-tex">), which browsers do not show but copy and assistive
# tools can read.
CONVERTER = LatexToMathML(fancy_error=False, annotation=True)


def on_page_content(html_text: str, page, **kwargs) -> str:
    """The page's HTML with every arithmatex formula as MathML (a formula that fails stays LaTeX, warned)."""

    def mathml(match: re.Match) -> str:
        latex = html.unescape(match["latex"]).strip()
        try:
            rendered = CONVERTER.convert_with_local_state(latex, displaystyle=match["open"] == "[")
        except LatexError as error:
            log.warning("%s: cannot render the formula `%s`: %s", page.file.src_uri, latex, error)
            return match[0]
        return f'<{match["tag"]} class="arithmatex">{rendered}</{match["tag"]}>'

    return FORMULA.sub(mathml, html_text)
