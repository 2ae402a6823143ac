"""`sgt stages`: each stage's cache key, whether its result is in the store, and its files; runs nothing."""

from __future__ import annotations

import argparse
from pathlib import Path

STAGES_HELP = """\
Lists the stages of the configuration the overrides compose: each stage's cache key, whether a complete
artifact with that key exists (`sgt run` would reuse it) and its folder with the main files in it.
Runs nothing and writes nothing. Examples:
  sgt stages                                # the default configuration
  sgt stages train.epochs=50                # only train's key changes: only train shows "no"
  sgt stages dataset=npz dataset.path=../shared/datasets/tolokers.npz --json
"""


def add_parser(commands) -> None:
    """`sgt stages [--json] [--verify] OVERRIDES`."""
    stages = commands.add_parser("stages", help="list stages, cache keys, cache state and artifact paths",
                                 description=STAGES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    stages.add_argument("overrides", nargs="*", help="Hydra overrides, key=value")
    stages.add_argument("--json", action="store_true", help="print JSON instead of a table")
    stages.add_argument("--verify", action="store_true",
                        help="also verify every file's checksum against its stage's manifest (reads every file)")
    stages.set_defaults(handler=lambda args: command_stages(args.overrides, args.json, args.verify))


def stage_files() -> dict[str, tuple[str, ...]]:
    """Each stage's main outputs inside its artifact folder, as glob patterns."""
    from sgt_core.estimate.outputs import ESTIMATOR_FILE, SCORES_FILE
    from sgt_core.export.outputs import SCORES_DIR
    from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
    from sgt_core.preprocess.substructure_tokens import SUBSTRUCTURES_FILE
    from sgt_core.train.outputs import MODEL_FILE

    return {
        "preprocess": (INTERACTION_GRAPH_FILE, SUBSTRUCTURES_FILE),
        "estimate": (SCORES_FILE, ESTIMATOR_FILE),
        "export": (f"{SCORES_DIR}/layer_*.parquet",),
        "train": (MODEL_FILE,),
    }


def command_stages(overrides: list[str], as_json: bool, verify: bool = False) -> int:
    import json

    from sgt_core.config import compose_config
    from sgt_core.object_store import open_store
    from sgt_core.pipeline import stage_keys
    from sgt_core.train.kept_results import kept_results

    cfg = compose_config(overrides)
    store = open_store(cfg["paths"]["artifacts"])
    main_files = stage_files()
    stages = [{"stage": name, **cache_entry(store, name, key, main_files[name], verify)}
              for name, key in stage_keys(cfg).items()]
    kept = [(result, kept_entry(cfg, store, result, stages[0], verify)) for result in kept_results()]
    if as_json:
        print(json.dumps({"artifacts": store.location(), "checksums_verified": verify, "stages": stages,
                          **{result.name: entry for result, entry in kept}}, indent=2))
        return 0
    print(f"configuration: {' '.join(overrides) or '(defaults)'}\nartifacts: {store.location()}")
    print(f"checked: file sizes{' and checksums' if verify else ' (--verify also checks checksums)'}\n")
    print(f"{'stage':<11} {'key':<17} {'cached':<8} folder")
    for stage in stages:
        print(f"{stage['stage']:<11} {stage['key']:<17} {_state(stage):<8} {stage['path']}")
        if stage["damage"]:
            print(f"{'':<38} {stage['damage']}: the next `sgt run` moves it aside and recomputes")
        for file in stage["files"]:
            print(f"{'':<38} {file.removeprefix(stage['path'] + '/')}")
    for result, entry in kept:
        if entry is not None:
            print(f"\n{result.description}: "
                  + (f"key {entry['key']}, cached {_state(entry)}, {entry['path']}" if entry["key"] else entry["unknown"]))
    return 0


def cache_entry(store, folder: str, key: str, patterns: tuple[str, ...], verify: bool) -> dict:
    """A result in the store, as `sgt stages` lists it: key, cached, damage, path and its files matching `patterns`.

    Read only: `sgt run` moves a damaged folder aside. An object store's result is listed from its manifest,
    nothing downloaded.
    """
    from fnmatch import fnmatch

    from sgt_core.object_store import ObjectArtifactStore

    damage = store.damage(folder, key, checksums=verify)
    if isinstance(store, ObjectArtifactStore):
        path = store.location(folder, key)
        manifest = store.remote_manifest(folder, key) if damage is None else None
        cached = manifest is not None
        files = sorted(f"{path}/{file}" for file in (manifest or {}).get("files", {})
                       if any(fnmatch(file, pattern) for pattern in patterns))
    else:
        local = store.path(folder, key).resolve()
        path, cached = str(local), local.exists() and damage is None
        files = sorted(str(p) for pattern in patterns for p in local.glob(pattern)) if cached else []
    return {"key": key, "cached": cached, "damage": damage, "path": path, "files": files}


def kept_entry(cfg: dict, store, result, preprocess: dict, verify: bool) -> dict | None:
    """Where the train stage keeps `result` (a `sgt_core.train.kept_results.KeptResult`), and whether it is there;
    None when the configuration does not use it.

    Its key is known once the preprocess stage's result is here to read.
    """
    from sgt_core.object_store import ObjectArtifactStore

    if not result.needed(cfg):
        return None
    entry = {"key": None, "cached": False, "damage": None, "path": None, "files": []}
    if not preprocess["cached"]:
        return {**entry, "unknown": "their key is known once the preprocess stage's result is cached"}
    if isinstance(store, ObjectArtifactStore):
        return {**entry, "unknown": "their key is not shown: `sgt stages` does not download the interaction graph"}
    key = result.key(cfg, Path(preprocess["path"]))
    return cache_entry(store, result.folder, key, result.files, verify)


def _state(entry: dict) -> str:
    return "yes" if entry["cached"] else "damaged" if entry["damage"] else "no"
