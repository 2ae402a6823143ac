"""Imported by the stages' fork server only: each stage's import closure parsed once there, so that every
process forked from it (the one computing the run's cache keys among them) hashes the stages' code in
milliseconds instead of parsing every source again (about a second)."""

from sgt_core.code_version import code_files
from sgt_core.pipeline import STAGES

for _stage in STAGES:
    code_files(_stage.module)
