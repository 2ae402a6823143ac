"""Griffe extension (mkdocs.yml): a package's re-exports are documented once, in the module defining them.

`sgt_core/models/__init__.py` imports `Spexphormer` from `sgt_core.models.spexphormer` and lists it in
`__all__`, so that users write `from sgt_core.models import Spexphormer`. mkdocstrings renders a public
alias in full, and with `show_submodules` the defining module renders the same class again: before this,
every re-exported class and function, with each of its methods, appeared twice on its page (66 objects
over six pages). This makes such an alias, a module member whose target lies in one of that package's own
submodules, not public, so only the defining module renders it. Its path still works as a cross-reference
(`[Spexphormer][sgt_core.models.Spexphormer]`): autorefs maps an object's aliases to its one anchor.
Aliases of objects from elsewhere (another package, a sibling module) keep griffe's usual rule.
"""

from __future__ import annotations

import griffe


class DocumentReexportsOnce(griffe.Extension):
    """Hides a package's aliases of its own submodules' objects from the rendered reference."""

    def on_alias(self, *, alias: griffe.Alias, loader: griffe.GriffeLoader, **kwargs) -> None:
        package = alias.parent
        if package is not None and package.is_module and alias.target_path.startswith(package.path + "."):
            alias.public = False
