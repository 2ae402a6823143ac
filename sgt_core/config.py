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
