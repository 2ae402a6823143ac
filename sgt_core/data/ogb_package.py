"""The `ogb` package, imported without the version check its `__init__` starts."""

from __future__ import annotations

import os
import sys
from types import ModuleType


def import_ogb() -> ModuleType:
    """Imports `ogb` (once per process) without its check for a newer release.

    ogb's `__init__` starts a thread that asks PyPI, through the `outdated` package, whether ogb is the
    latest release: a request without a timeout from a thread the interpreter waits for at exit, and a
    warning when it is not. Offline it may hang; OUTDATED_IGNORE=1, which is set too, only silences the
    warnings. While ogb is imported here `outdated` cannot be imported, so ogb skips the check.
    """
    if "ogb" in sys.modules:
        return sys.modules["ogb"]
    os.environ.setdefault("OUTDATED_IGNORE", "1")
    hide = "outdated" not in sys.modules
    if hide:
        sys.modules["outdated"] = None  # `from outdated import ...` raises ImportError, which ogb expects
    try:
        import ogb
    finally:
        if hide:
            del sys.modules["outdated"]
    return ogb
