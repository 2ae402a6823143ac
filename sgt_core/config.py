"""Composing the Hydra configuration from `conf/` and checking it before any stage runs."""

from __future__ import annotations

import os
import re
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sgt_core.errors import ConfigError
from sgt_core.preprocess.substructures import SUBSTRUCTURE_TYPES
from sgt_core.sampling import TRAIN_SAMPLERS

STAGE_NAMES = ("preprocess", "estimate", "export", "train")


def config_dir() -> Path:
    """`$SGT_CONF_DIR`, else the repository's `conf/` folder."""
    return Path(os.environ.get("SGT_CONF_DIR", Path(__file__).resolve().parents[1] / "conf"))


def compose_config(overrides: list[str] | None = None) -> dict:
    """The resolved configuration as a plain dict, from `conf/config.yaml` and Hydra `overrides`."""
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            cfg: DictConfig = compose(config_name="config", overrides=list(overrides or []))
        resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(_explain(error)) from None
    validate_config(resolved)
    return resolved


def _explain(error: Exception) -> str:
    """One readable line from a Hydra/OmegaConf error: what failed, why, and the options if Hydra lists them."""
    lines = str(error).splitlines()
    parts = [lines[0].rstrip(".")]
    if error.__cause__ is not None:
        parts.append(str(error.__cause__).splitlines()[0])
    full_key = getattr(error, "full_key", None)
    if full_key and full_key not in parts[0]:
        parts[0] = f"{parts[0]} ({full_key})"
    missing_option = re.search(r"Could not find '([\w-]+)/([^']+)'", lines[0])
    if missing_option:
        group = missing_option.group(1)
        known = sorted(path.stem for path in (config_dir() / group).glob("*.yaml"))
        parts[0] = f"unknown {group} '{missing_option.group(2)}'"
        parts.append(f"expected one of: {', '.join(known)}")
    return "configuration: " + "; ".join(parts)


def validate_config(cfg: dict) -> None:
    """Rejects values the stages cannot run with, before anything runs."""
    problems = []
    if cfg["stage"] not in ("all", *STAGE_NAMES):
        problems.append(f"stage={cfg['stage']!r}: expected 'all' or one of {', '.join(STAGE_NAMES)}")
    expander = cfg["preprocess"]["expander"]
    if expander["enabled"] and (expander["degree"] < 2 or expander["degree"] % 2):
        problems.append(f"preprocess.expander.degree={expander['degree']}: must be an even number >= 2")
    if cfg["preprocess"]["virtual_nodes"] < 0:
        problems.append(f"preprocess.virtual_nodes={cfg['preprocess']['virtual_nodes']}: must be >= 0")
    problems += _component_problems(cfg)
    model = cfg["model"]
    if len(model["degrees"]) != model["num_layers"]:
        problems.append(
            f"model.degrees has {len(model['degrees'])} entries but model.num_layers is {model['num_layers']}"
        )
    if any(d < 1 for d in model["degrees"]):
        problems.append(f"model.degrees={model['degrees']}: every degree must be >= 1")
    if model["hidden"] % model["heads"]:
        problems.append(f"model.hidden={model['hidden']} is not divisible by model.heads={model['heads']}")
    if cfg["estimator"]["num_layers"] != model["num_layers"]:
        problems.append("estimator.num_layers must equal model.num_layers (one score set per wide layer)")
    if cfg["train"]["sampler"] not in TRAIN_SAMPLERS:
        problems.append(f"train.sampler={cfg['train']['sampler']!r}: expected one of {', '.join(TRAIN_SAMPLERS)}")
    if cfg["train"]["sampler"] == "full" and cfg["train"]["batch_size"] is not None:
        problems.append("train.sampler=full attends over whole neighbourhoods and needs train.batch_size=null")
    if cfg["train"]["batch_size"] is not None and cfg["train"]["batch_size"] < 1:
        problems.append(f"train.batch_size={cfg['train']['batch_size']}: must be null or >= 1")
    if cfg["train"]["eval_every"] < 1:
        problems.append(f"train.eval_every={cfg['train']['eval_every']}: must be >= 1")
    if cfg["train"]["device"] not in ("auto", "cpu", "cuda"):
        problems.append(f"train.device={cfg['train']['device']!r}: expected auto, cpu or cuda")
    for section in ("estimator", "train"):
        if cfg[section]["epochs"] < 1:
            problems.append(f"{section}.epochs={cfg[section]['epochs']}: must be >= 1")
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))


def _is_count(value, allow_none: bool = False) -> bool:
    """An int >= 0 (bools excluded), or None where allowed."""
    if value is None:
        return allow_none
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _component_problems(cfg: dict) -> list[str]:
    """Checks the switchable interaction-graph components (anchors, substructures, LPE) that are on.

    These run late (preprocessing a large graph takes a while, the LPE's sizes reach the networks only in
    the estimate and train stages), so bad values are caught here instead.
    """
    problems = []
    anchors = cfg["preprocess"]["anchors"]
    if anchors["enabled"]:
        if not _is_count(anchors["k"]) or anchors["k"] < 1:
            problems.append(f"preprocess.anchors.k={anchors['k']!r}: must be an integer >= 1")
        elif not _is_count(anchors["max_spd"]) or not anchors["k"] < anchors["max_spd"] <= 32767:
            problems.append(
                f"preprocess.anchors.max_spd={anchors['max_spd']!r}: must be an integer with "
                f"k={anchors['k']} < max_spd <= 32767 (anchors beyond k hops need their own SPD buckets)"
            )
        for key in ("max_khop_per_node", "max_anchors_per_node"):
            if not _is_count(anchors[key], allow_none=True):
                problems.append(f"preprocess.anchors.{key}={anchors[key]!r}: must be null or an integer >= 0")
    substructures = cfg["preprocess"]["substructures"]
    if substructures["enabled"]:
        if not _is_count(substructures["threshold"]):
            problems.append(
                f"preprocess.substructures.threshold={substructures['threshold']!r}: must be an integer >= 0"
            )
        if not _is_count(substructures["max_size"]) or substructures["max_size"] < 1:
            problems.append(
                f"preprocess.substructures.max_size={substructures['max_size']!r}: must be an integer >= 1"
            )
        types = substructures["types"] or {}
        unknown = sorted(set(types) - set(SUBSTRUCTURE_TYPES))
        if unknown:
            problems.append(
                f"preprocess.substructures.types: unknown types {', '.join(unknown)}; expected names from "
                f"{', '.join(SUBSTRUCTURE_TYPES)}"
            )
        for name, cap in types.items():
            if name in SUBSTRUCTURE_TYPES and not _is_count(cap, allow_none=True):
                problems.append(
                    f"preprocess.substructures.types.{name}={cap!r}: must be null or an integer >= 0"
                )
    lpe = cfg["preprocess"]["lpe"]
    if lpe["enabled"]:
        if not _is_count(lpe["m"]) or lpe["m"] < 1:
            problems.append(f"preprocess.lpe.m={lpe['m']!r}: must be an integer >= 1")
        for section in ("estimator", "model"):
            options = cfg[section]
            dim, layers, heads = options["lpe_dim"], options["lpe_layers"], options["lpe_heads"]
            if not _is_count(dim):
                problems.append(f"{section}.lpe_dim={dim!r}: must be an integer >= 0 (0 skips the LPE)")
            elif dim > 0 and not (_is_count(layers) and layers >= 1 and _is_count(heads) and heads >= 1
                                  and dim % heads == 0):
                problems.append(
                    f"{section}.lpe_dim={dim}, lpe_layers={layers!r}, lpe_heads={heads!r}: need layers >= 1, "
                    f"heads >= 1 and lpe_dim divisible by lpe_heads"
                )
    if not isinstance(cfg["model"]["deepnorm"], bool):
        problems.append(f"model.deepnorm={cfg['model']['deepnorm']!r}: must be true or false")
    return problems
