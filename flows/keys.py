"""Each stage's cache key for a run, computed where the stages run, so that the flow's process never imports torch."""

from __future__ import annotations

from flows.isolation import call_in_stage_process, uses_stage_server
from sgt_core.pipeline import stage_keys


def run_keys(cfg: dict) -> dict[str, str]:
    """`stage_keys(cfg)` as the stages' processes compute it.

    A key hashes the kernel backend, which only torch can tell, and a dataset=parquet table's files, which
    PyG's loader lists. With stage_isolation=process a process forked from the stages' server (torch imported
    already) computes the keys and sees the flow's environment as the stages will; with the stages inline, or
    on work pools (whose workers key what they run themselves), this process does.
    """
    if not uses_stage_server(cfg):
        return stage_keys(cfg)
    return call_in_stage_process("sgt_core.pipeline:stage_keys", cfg)
