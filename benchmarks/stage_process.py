"""Runs one stage in a fresh process and reports its wall time and peak resident memory as JSON.

    python -m benchmarks.stage_process STAGE CONFIG.json OUT_DIR [UPSTREAM=DIR ...]

Only the stage's own module is imported (not the pipeline, Prefect or MLflow), so the peak RSS is what
the stage itself costs, interpreter and torch included.
"""

from __future__ import annotations

import importlib
import json
import resource
import sys
import time
from pathlib import Path

from flows.memory import status_mb

STAGE_FUNCTIONS = {
    "preprocess": "sgt_core.preprocess.stage:run_preprocess",
    "estimate": "sgt_core.estimate.stage:run_estimate",
    "export": "sgt_core.export.stage:run_export",
    "train": "sgt_core.train.stage:run_train",
}


def peak_rss_mb() -> float:
    """This process's own peak RSS: VmHWM, the high-water mark of its address space.

    Not getrusage's ru_maxrss: Linux carries the parent's high-water mark across fork and exec into the
    child's ru_maxrss, so a stage started by a 460 MB benchmark process reported at least 460 MB.
    """
    peak = status_mb("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str]) -> None:
    stage, config_path, out_dir, *upstream = argv
    module_name, function_name = STAGE_FUNCTIONS[stage].split(":")
    run = getattr(importlib.import_module(module_name), function_name)
    cfg = json.loads(Path(config_path).read_text())
    inputs = {name: Path(path) for name, path in (item.split("=", 1) for item in upstream)}
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    metrics = run(cfg, inputs, Path(out_dir))
    seconds = time.perf_counter() - started
    peak_mb = peak_rss_mb()
    print(json.dumps({"stage": stage, "seconds": seconds, "peak_rss_mb": peak_mb, "metrics": metrics}))


if __name__ == "__main__":
    main(sys.argv[1:])
