"""The `export` group: writing the estimator's scores to Parquet (conf/export/default.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from sgt_core.config.section import NULL_OR_POSITIVE_INTEGER, Section, checked


@dataclass(frozen=True)
class ExportConfig(Section):
    """`export`: the argument of `write_attention_scores` of the same name.

    Attributes:
        max_candidates_per_node: None: every candidate of every node; k: each node's k highest-scored
            candidates, their scores renormalised to sum to 1.
    """

    PATH = "export"

    max_candidates_per_node: int | None = checked(NULL_OR_POSITIVE_INTEGER)
