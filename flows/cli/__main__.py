"""`python -m flows.cli`: the `sgt` command."""

from flows.cli import program

program()
