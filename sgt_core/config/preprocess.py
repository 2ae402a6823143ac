"""The `preprocess` group: what the interaction graph is built from (conf/preprocess/default.yaml).

Each component's group is the argument of the same name of `build_interaction_graph`; the defaults
here are conf/'s (tests/config/test_compose.py checks they agree), for code and tests that build one by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from sgt_core.config.section import (
    BOOLEAN,
    NON_NEGATIVE,
    NULL_OR_COUNT,
    NULL_OR_POSITIVE_INTEGER,
    Problem,
    Rule,
    Section,
    checked,
    integer,
    is_int,
)

# DeepGraph's substructure types, the valid keys of `preprocess.substructures.types` (the vocabulary's
# order, which fixes the type ids, is `sgt_core.preprocess.interaction_graph.SUBSTRUCTURE_TYPES`; a test
# checks both hold the same names).
SUBSTRUCTURE_TYPES: tuple[str, ...] = (
    *(f"cycle_{k}" for k in range(3, 9)),
    *(f"star_{k}" for k in range(2, 7)),
    *(f"path_{k}" for k in range(4, 9)),
    "hop2",
    "random_walk",
)
# conf/'s caps: 1000 candidates of each geometric type, every hop2 and random-walk candidate.
DEFAULT_SUBSTRUCTURE_CAPS: dict[str, int | None] = {
    name: None if name in ("hop2", "random_walk") else 1000 for name in SUBSTRUCTURE_TYPES
}
EVEN_DEGREE: Rule = (lambda value: is_int(value) and value >= 2 and value % 2 == 0), "must be an even integer >= 2"
SPD_LIMIT = 32767  # SPD buckets are stored as int16


@dataclass(frozen=True)
class ExpanderConfig(Section):
    """`preprocess.expander`: Exphormer's random regular expander (`build_interaction_graph`'s `expander`).

    `degree`, `ramanujan_slack`, `max_tries` and `spectral_check_steps` are `hamiltonian_expander`'s
    arguments of the same names; `per_component` chooses one expander per connected component.

    Attributes:
        enabled: add the expander edges.
        degree: even degree d: the union of d/2 random Hamiltonian cycles.
        ramanujan_slack: redraw while the second-largest |eigenvalue| exceeds 2*sqrt(d-1) + slack.
        max_tries: expanders drawn before giving up.
        spectral_check_steps: Lanczos steps of that check on graphs above 64 nodes.
        per_component: one expander inside each connected component instead of one across all nodes (on a
            dataset of many graphs there is one per graph anyway; this splits each graph's by component).
    """

    PATH = "preprocess.expander"

    enabled: bool = checked(BOOLEAN, True)
    degree: int = checked(EVEN_DEGREE, 10)
    ramanujan_slack: float = checked(NON_NEGATIVE, 0.1)
    max_tries: int = checked(integer(1), 20)
    spectral_check_steps: int = checked(integer(1), 100)
    per_component: bool = checked(BOOLEAN, False)


@dataclass(frozen=True)
class AnchorsConfig(Section):
    """`preprocess.anchors`: AnchorGT's anchor and k-hop edges (see `anchors.receptive_field_edges`).

    Attributes:
        enabled: add the anchor and k-hop edges.
        k: hop radius of the k-dominating set and of the k-hop edges.
        max_khop_per_node: most k-hop edges per node (nearest shells first, random in the last); None: all.
        max_anchors_per_node: most anchor edges per node (nearest anchors by SPD, random ties); None: all,
            as in AnchorGT.
        max_spd: last SPD bucket, shared by farther and unreachable anchors; k < max_spd.
        max_nodes: larger graphs are refused (`preprocess.stage.check_size_limits`); None: no limit.
    """

    PATH = "preprocess.anchors"

    enabled: bool = checked(BOOLEAN, True)
    k: int = checked(integer(1), 2)
    max_khop_per_node: int | None = checked(NULL_OR_COUNT, 32)
    max_anchors_per_node: int | None = checked(NULL_OR_COUNT, None)
    max_spd: int = checked(integer(2), 8)
    max_nodes: int | None = checked(NULL_OR_POSITIVE_INTEGER, 100_000)

    def relation_problems(self) -> list[Problem]:
        if self.k < self.max_spd <= SPD_LIMIT:
            return []
        return [(self.key("max_spd"), (f"must be an integer with k={self.k} < max_spd <= {SPD_LIMIT} (anchors "
                                       f"beyond k hops need their own SPD buckets), found {self.max_spd!r}"))]


@dataclass(frozen=True)
class SubstructuresConfig(Section):
    """`preprocess.substructures`: DeepGraph's substructure tokens (see `sample_substructure_tokens`).

    Attributes:
        enabled: add one token node per sampled substructure.
        threshold: coverage target: sample until every node lies in `threshold` tokens, or none is left.
        max_size: side s of the padded DFS adjacency matrix (larger instances keep their first s DFS nodes).
        types: type name -> cap (most candidates matched, per graph on a dataset of many graphs); 0 or absent
            switches a type off, None keeps all.
        max_nodes: larger graphs are refused (`preprocess.stage.check_size_limits`); None: no limit.
    """

    PATH = "preprocess.substructures"

    enabled: bool = checked(BOOLEAN, True)
    threshold: int = checked(integer(0), 2)
    max_size: int = checked(integer(1), 16)
    types: dict[str, int | None] = checked((lambda value: isinstance(value, dict) or value is None,
                                            "must be a group of keys (type: cap)"),
                                           default_factory=lambda: dict(DEFAULT_SUBSTRUCTURE_CAPS))
    max_nodes: int | None = checked(NULL_OR_POSITIVE_INTEGER, 100_000)

    def relation_problems(self) -> list[Problem]:
        types = self.types or {}
        problems = [(self.key(f"types.{name}"), (f"unknown key; valid keys in {self.key('types')}: "
                                                  f"{', '.join(SUBSTRUCTURE_TYPES)}"))
                    for name in sorted(set(types) - set(SUBSTRUCTURE_TYPES))]
        check, expected = NULL_OR_COUNT
        return problems + [(self.key(f"types.{name}"), f"{expected}, found {cap!r}")
                           for name, cap in types.items() if name in SUBSTRUCTURE_TYPES and not check(cap)]


@dataclass(frozen=True)
class LpeConfig(Section):
    """`preprocess.lpe`: SAN's Laplacian eigenpairs, the input of the learned positional encoding.

    Attributes:
        enabled: compute the eigenpairs (the networks' `lpe_dim` decides whether they use them).
        m: the m lowest eigenpairs of the normalised Laplacian per node (`laplacian_eigenpairs`).
        max_nodes: larger graphs are refused (`preprocess.stage.check_size_limits`); None: no limit.
    """

    PATH = "preprocess.lpe"

    enabled: bool = checked(BOOLEAN, True)
    m: int = checked(integer(1), 8)
    max_nodes: int | None = checked(NULL_OR_POSITIVE_INTEGER, 200_000)


@dataclass(frozen=True)
class PreprocessConfig(Section):
    """`preprocess`: the typed interaction graph (Exphormer section 3.2; Spexphormer section 3).

    The fields are `build_interaction_graph`'s arguments of the same names (the substructure group
    reaches it as the tokens `sample_substructure_tokens` draws with it).
    """

    PATH = "preprocess"

    self_loops: bool = checked(BOOLEAN)
    expander: ExpanderConfig
    virtual_nodes: int = checked(integer(0))
    anchors: AnchorsConfig
    substructures: SubstructuresConfig
    lpe: LpeConfig
