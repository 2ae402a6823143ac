"""Builds the C++ kernels ahead of time (`make setup`), so that no stage waits for the compiler."""

from __future__ import annotations

import sys

from sgt_core.kernels import library


def main() -> int:
    """Builds (or finds) the kernels for this machine's settings and prints the library's path."""
    try:
        path = library.build(verbose="-v" in sys.argv[1:])
    except (OSError, RuntimeError, ImportError) as error:
        print(f"the CPU kernels could not be built ({error}); the stages will use the torch kernels",
              file=sys.stderr)
        return 1
    print(f"sgt kernels ({library.backend()}): {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
