"""`python -m flows.cli`: the `sgt` command."""

import sys

from flows.cli import main

sys.exit(main())
