"""The wide network on several processes: torchrun starts the ranks, DistributedDataParallel joins them.

With `train.distributed.nproc_per_node` x `nnodes` > 1 the train stage does not train in its own process:

1. `launch` (in the stage's process) writes the config and the input and output folders to
   `<out_dir>/_distributed/launch.json`, runs torch's launcher on it,
   `python -m torch.distributed.run --nnodes M --nproc-per-node N (--standalone | --rdzv-backend c10d
   --rdzv-endpoint E --rdzv-id ID) -m sgt_core.train.distributed <launch.json>`, and waits. torchrun's
   elastic agent starts the N local ranks, restarts none (`--max-restarts 0`) and stops the others when
   one fails; every further node runs the same command (the stage logs it) and meets at the endpoint.
2. Each rank (`main`, then the function `launch` was given: `sgt_core.train.stage.run_rank`, named in the
   launch file, so this module never imports the stage's) joins the default process group (gloo on the
   CPU, NCCL on CUDA with one GPU per local rank), loads the inputs, builds the same network from the
   same seed and trains it under DistributedDataParallel on its share of every global batch (`Ranks`).
3. Rank 0 alone writes model.pt, history.json and sampled_degrees.json into the stage's folder, as the
   single-process stage does, and its metrics into `_distributed/`, from where `launch` returns them; the
   folder is removed before the stage ends, so the stage's files and metrics are the single-process ones.

How a global batch of B target nodes is shared (Spexphormer Algorithm 2 on every rank):
- Every rank shuffles the training nodes with the same generator, seeded by (seed, epoch), and cuts the
  same global batches of B; rank r takes the r-th of W near-equal slices of each and samples its layers
  backwards from those targets with a generator of its own, seeded by (seed, epoch, rank), as are its
  dropout masks. So every rank takes the same number of steps, and a run is reproducible.
- Loss: each rank's loss is its slice's summed cross-entropy times W / B. DDP averages gradients over the
  W ranks, so the step follows the gradient of the mean loss over all B targets: the single-process
  step over those targets (`F.cross_entropy`'s mean over the batch).
- Batch norm: with per-rank statistics a rank would normalise over its B/W targets' neighbourhoods only,
  a different function from one process's batch of B (and from one rank count to another). Every
  nn.BatchNorm1d therefore becomes a synchronised one, normalising over the rows of all ranks: torch's
  nn.SyncBatchNorm on CUDA, and on the CPU, which it refuses, `SyncBatchNorm1d` (the same statistics
  through gloo all-reduces). Then W ranks with the same samples compute exactly the forward pass and
  the gradient of one process whose batch holds all their samples (tests/train/test_distributed.py).
  What remains different from one process drawing batch B itself: a node that two ranks' neighbourhoods
  share is sampled and computed on both (Algorithm 2 within one process computes it once).
- Evaluation: the evaluated nodes are cut into W contiguous slices; each rank predicts its slice in
  batches of ceil(B / W) and `all_gather` puts the logits back in order, so the reported metrics cover
  every node exactly once. In evaluation batch norm uses its running statistics, which the synchronised
  layers keep identical on every rank, so the ranks need no collective but the gather.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from sgt_core.artifacts import ArtifactError, atomic_path
from sgt_core.errors import ConfigError, DatasetError, SGTError
from sgt_core.lifeline import end_with, parent_death_signal
from sgt_core.numerics import NonFiniteLossError
from sgt_core.progress import current_position, note_position
from sgt_core.train.sync_batch_norm import SyncBatchNorm1d

log = logging.getLogger(__name__)

LAUNCH_DIR = "_distributed"  # inside the stage's folder while the ranks run; removed before it is published
LAUNCH_FILE = "launch.json"
RESULT_FILE = "result.json"
HEAR_S = 0.5  # how long an interrupted torchrun has to end by itself before it is interrupted
STOP_GRACE_S = 10.0  # how long it then has to stop its ranks before SIGKILL (the flow waits 15 s for the stage)
LOG_MARK = "sgt-rank-log "  # a rank's log record on its stderr, re-emitted by `launch` under its logger
# Errors a rank raises that the stage re-raises as the same type (one line for the CLI, no traceback).
USER_ERRORS = {cls.__name__: cls for cls in (SGTError, ConfigError, DatasetError, NonFiniteLossError, ArtifactError)}
ORDER, SAMPLING, DROPOUT = 0, 1, 2  # the random streams of an epoch


class DistributedTrainingError(SGTError):
    """A rank failed, was killed, or torchrun ended without a result: one line, `train: rank R of W <what>`.

    Attributes:
        details: the failing rank's traceback and torchrun's last lines, for the stage's log (not the terminal).
    """

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


def world_size(options: dict) -> int:
    """How many processes train the wide network: `nproc_per_node` x `nnodes` of `train.distributed`."""
    distributed = options["distributed"]
    return distributed["nproc_per_node"] * distributed["nnodes"]


def stream_seed(seed: int, epoch: int, stream: int, rank: int = 0) -> int:
    """A seed for one random stream of one epoch (and rank), independent of the others (NumPy's SeedSequence)."""
    state = np.random.SeedSequence([seed, epoch, stream, rank]).generate_state(1, np.uint64)[0]
    return int(state >> np.uint64(1))  # below 2^63: a valid seed for every torch generator


# --- in the stage's process --------------------------------------------------------------------------------


def torchrun_command(distributed: dict, launch_file: Path, run_id: str) -> list[str]:
    """The launcher's command line: the same on every node."""
    if distributed["rdzv_endpoint"] is None:
        rendezvous = ["--standalone"]  # a local c10d store on a free port: one node
    else:
        rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", distributed["rdzv_endpoint"], "--rdzv-id", run_id]
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(distributed["nnodes"]),
            "--nproc-per-node", str(distributed["nproc_per_node"]), *rendezvous, "--max-restarts", "0",
            "-m", __name__, str(launch_file)]


def rendezvous_id(folder: Path) -> str:
    """The run's id at the rendezvous, from its launch folder: the same for every node's command."""
    return "sgt-" + hashlib.sha256(bytes(folder)).hexdigest()[:12]


def rank_environment(nproc_per_node: int) -> dict[str, str]:
    """The ranks' environment: this one, with the node's cores shared out among its ranks.

    torch (and the compiled kernels) start one OpenMP thread per core in every process; with more busy
    threads than cores, OpenMP's spin-waiting between parallel regions made stages 6-12x slower on this
    machine. So each local rank gets cores // ranks threads (at least 1), and PASSIVE waiting makes an idle
    thread sleep instead of spinning. Both are set whatever the environment had: what suits one process
    over-subscribes N of them.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return {**os.environ, "OMP_NUM_THREADS": str(max(1, cores // nproc_per_node)), "OMP_WAIT_POLICY": "PASSIVE"}


def launch(rank_main: Callable[[dict, dict[str, Path], Path], dict], cfg: dict, inputs: dict[str, Path],
           out_dir: Path) -> dict:
    """Trains on `world_size` ranks through torchrun and returns rank 0's metrics; rank 0 wrote the files.

    Each rank runs `rank_main(cfg, inputs, out_dir)`, a module-level function that ranks import by name.

    Raises:
        SGTError: the first failing rank's error, when it is one, as its own type (e.g. a non-finite loss).
        DistributedTrainingError: the first failing rank's error of any other type, naming the rank; also
            when torchrun ends without a result.
    """
    distributed = cfg["train"]["distributed"]
    folder = out_dir.resolve() / LAUNCH_DIR
    folder.mkdir()
    launch_file = folder / LAUNCH_FILE
    launch_file.write_text(json.dumps({
        "config": cfg,
        "inputs": {name: str(Path(path).resolve()) for name, path in inputs.items()},
        "out_dir": str(out_dir.resolve()),
        "rank_main": f"{rank_main.__module__}:{rank_main.__qualname__}",
    }))
    command = torchrun_command(distributed, launch_file, rendezvous_id(folder))
    world = world_size(cfg["train"])
    log.info("training on %d processes (%d per node, %d node%s) through torchrun", world,
             distributed["nproc_per_node"], distributed["nnodes"], "s" if distributed["nnodes"] > 1 else "")
    if distributed["nnodes"] > 1:
        log.info("waiting at %s for the other %d node(s); on each, with this checkout and the artifacts at the "
                 "same paths, run `sgt ddp-node --rdzv-endpoint %s`, or: %s", distributed["rdzv_endpoint"],
                 distributed["nnodes"] - 1, distributed["rdzv_endpoint"], shlex.join(["python", *command[1:]]))
    try:
        returncode, tail = _run(command, rank_environment(distributed["nproc_per_node"]))
        result = folder / RESULT_FILE
        if returncode == 0 and result.is_file():
            return json.loads(result.read_text())
        raise _rank_error(folder, returncode, tail, world)
    except KeyboardInterrupt:
        rank_zero = folder / "rank0.error.json"
        position = json.loads(rank_zero.read_text()).get("position") if rank_zero.is_file() else None
        if position:  # the epoch rank 0 was at: what the interrupt names
            note_position(*position)
        raise
    finally:
        shutil.rmtree(folder)


def pending_launches(train_dir: Path, endpoint: str) -> dict[Path, dict]:
    """The launch files (and their `train.distributed`) of train stages running under `train_dir` that wait
    for other nodes at `endpoint`."""
    pending = {}
    for launch_file in sorted(train_dir.glob(f"*/{LAUNCH_DIR}/{LAUNCH_FILE}")):  # pathlib's `*` matches .tmp-*
        try:
            distributed = json.loads(launch_file.read_text())["config"]["train"]["distributed"]
        except (OSError, ValueError, KeyError):  # being written, or removed as the stage ended
            continue
        if distributed["nnodes"] > 1 and distributed["rdzv_endpoint"] == endpoint:
            pending[launch_file] = distributed
    return pending


def join_launches(train_dir: Path, endpoint: str, once: bool = False, poll_s: float = 2.0) -> int:
    """A further node: runs torchrun for each train stage that waits at `endpoint`; returns the last exit status.

    What `sgt ddp-node` runs on every node but the stage's own, so that no one copies a command with a
    temporary path from a log. It watches the train stages' folders on the shared artifacts file system
    (the ranks of every node read their inputs and write there, at the same paths) and starts the same
    torchrun command as the stage (`torchrun_command`, same rendezvous id), whose c10d rendezvous makes it
    one node of that run. torchrun stays the launcher; this only notices that a run needs it. With `once`
    it returns after one run; otherwise it serves runs until interrupted, each launch file once.
    """
    joined: set[Path] = set()
    while True:
        pending = pending_launches(train_dir, endpoint)
        joined &= pending.keys()  # forget runs whose folder is gone
        for launch_file, distributed in pending.items():
            if launch_file in joined:
                continue
            joined.add(launch_file)
            stage_dir = launch_file.parent.parent
            command = torchrun_command(distributed, launch_file, rendezvous_id(launch_file.parent))
            log.info("joining the train stage in %s at %s as one of its %d nodes", stage_dir, endpoint,
                     distributed["nnodes"])
            returncode, tail = _run(command, rank_environment(distributed["nproc_per_node"]))
            if returncode == 0:
                log.info("the train stage in %s finished", stage_dir)
            else:
                log.error("torchrun ended with exit status %d for %s: %s", returncode, stage_dir,
                          " | ".join(tail[-5:]))
            if once:
                return returncode
        time.sleep(poll_s)


def _run(command: list[str], environment: dict[str, str]) -> tuple[int, list[str]]:
    """Runs torchrun, re-emitting the ranks' log records here; returns its exit status and last other lines."""
    tail: deque[str] = deque(maxlen=80)
    # Between fork and exec only the prctl call runs: no lock another thread could hold is taken.
    # torchrun gets SIGTERM if this process dies without cleaning up (killed): its agent then stops the ranks.
    process = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, bufsize=1, preexec_fn=parent_death_signal())  # noqa: PLW1509
    try:
        for line in process.stdout:
            line = line.rstrip("\n")
            if line.startswith(LOG_MARK):
                record = json.loads(line[len(LOG_MARK):])
                logging.getLogger(record["name"]).log(record["level"], "%s", record["message"])
            elif line.strip():
                log.debug("torchrun: %s", line)  # the launcher's own lines; tracebacks are in the error files
                tail.append(line)
        return process.wait(), list(tail)
    except BaseException as error:
        _stop(process, interrupted=isinstance(error, KeyboardInterrupt))
        raise


def _stop(process: subprocess.Popen, interrupted: bool) -> None:
    """Stops torchrun; after an interrupt as Ctrl-C does, so that its agent passes SIGINT on to the ranks
    and rank 0 reports the epoch it was at. A Ctrl-C in the terminal reached them all already: torchrun is
    given a moment to end by itself first. SIGKILL after `STOP_GRACE_S`."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if interrupted and main_thread else None
    try:  # communicate() reads what the ranks still write, so that none blocks on a full pipe
        if not interrupted:
            process.terminate()
        elif not _ends_within(process, HEAR_S):
            process.send_signal(signal.SIGINT)
        if not _ends_within(process, STOP_GRACE_S):
            process.kill()
            process.communicate()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _ends_within(process: subprocess.Popen, seconds: float) -> bool:
    try:
        process.communicate(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


# A failed rank in torchrun's closing report: its global rank and exit code (negative: the signal that ended it).
_FAILED_RANK = re.compile(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
# Signals torchrun's agent and an interrupt stop the ranks with: a rank ended so was not the first to fail.
_STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def killed_ranks(tail: list[str]) -> dict[int, str]:
    """The ranks torchrun reports ended by a signal other than its own stopping ones, with the signal's name."""
    killed = {}
    for rank, code in _FAILED_RANK.findall("\n".join(tail)):
        if int(code) < 0 and -int(code) not in _STOPPING_SIGNALS:
            killed[int(rank)] = signal_name(-int(code))
    return killed


def signal_name(number: int) -> str:
    """SIGKILL for 9; the number itself for one Python does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _rank_error(folder: Path, returncode: int, tail: list[str], world: int) -> Exception:
    """The error to raise for a failed run, naming the rank that failed first.

    A user-facing error (bad configuration, a non-finite loss) is raised as its own type. Otherwise a rank
    killed by a signal (SIGKILL: often the kernel's out-of-memory killer) comes first: the others' errors
    (a peer's closed connection) follow from it; then the earliest report of a rank's own exception.
    """
    reports = [json.loads(path.read_text()) for path in folder.glob("rank*.error.json")]
    user = sorted((report for report in reports if report["type"] in USER_ERRORS), key=lambda report: report["rank"])
    if user:
        return USER_ERRORS[user[0]["type"]](user[0]["message"])
    launcher = "torchrun's last lines:\n" + "\n".join(tail)
    killed = {rank: name for rank, name in killed_ranks(tail).items()
              if rank not in {report["rank"] for report in reports}}
    if killed:
        rank = min(killed)
        hint = " (often the kernel's out-of-memory killer)" if killed[rank] == "SIGKILL" else ""
        return DistributedTrainingError(f"train: rank {rank} of {world} was killed by {killed[rank]}{hint}; the other "
                                        "ranks were stopped and nothing was kept", launcher)
    if reports:
        report = min(reports, key=lambda report: (report.get("time", 0.0), report["rank"]))
        return DistributedTrainingError(
            f"train: rank {report['rank']} of {world} failed: {report['type']}: {report['message']}",
            f"rank {report['rank']}'s traceback:\n{report['traceback']}\n{launcher}")
    return DistributedTrainingError(
        f"train: torchrun ended with status {returncode} and no rank reported an error (a rank killed by a "
        f"signal, often for lack of memory?)", launcher)


# --- in each rank ------------------------------------------------------------------------------------------


@dataclass
class Ranks:
    """This process's place among the ranks, and what training does differently there.

    Attributes:
        rank, world: this rank and the number of ranks.
        seed: the run's seed, from which every epoch's streams are derived.
        batch_size: the global batch B of target nodes, shared out among the ranks.
        network: the DistributedDataParallel wrapper of the model, after `attach`.
    """

    rank: int
    world: int
    seed: int
    batch_size: int
    network: nn.Module | None = None

    @classmethod
    def join(cls, cfg: dict, device: torch.device) -> Ranks:
        """Joins the default process group from torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR...)."""
        if device.type == "cuda":
            dist.init_process_group("nccl", device_id=device)
        else:
            dist.init_process_group("gloo")
        return cls(dist.get_rank(), dist.get_world_size(), cfg["seed"], cfg["train"]["batch_size"])

    def finish(self) -> None:
        """Waits for every rank (rank 0 writes the files last), so that none leaves while others still work."""
        dist.barrier()

    def leave(self) -> None:
        """Drops the DDP wrapper, then the process group (also after a failure, without waiting for the others)."""
        self.network = None
        if dist.is_initialized():
            dist.destroy_process_group()

    def attach(self, training) -> None:
        """Synchronises `training`'s batch norm over the ranks and wraps its model in DDP.

        The parameters stay the objects the optimizer holds; evaluation calls the bare model, so it runs
        no collective (DDP would synchronise buffers before each forward pass).
        """
        device = training.x.device
        if device.type == "cuda":
            training.model = nn.SyncBatchNorm.convert_sync_batchnorm(training.model)
        else:
            training.model = SyncBatchNorm1d.convert(training.model)
        from torch.nn.parallel import DistributedDataParallel

        self.network = DistributedDataParallel(training.model, device_ids=[device.index] if device.type == "cuda" else None)
        training.batch_size = math.ceil(self.batch_size / self.world)  # what `training.predict` chunks by

    def check_split(self, name: str, units: Tensor, per_rank: int) -> None:
        if units.numel() < per_rank * self.world:
            raise ConfigError(f"train.distributed: the {name} split has {units.numel()} units (nodes, or graphs "
                              f"of a dataset of many), fewer than {per_rank} per process for {self.world} processes")

    def seed_epoch(self, training, epoch: int) -> None:
        """This rank's sampling and dropout streams for `epoch`."""
        training.generator.manual_seed(stream_seed(self.seed, epoch, SAMPLING, self.rank))
        torch.manual_seed(stream_seed(self.seed, epoch, DROPOUT, self.rank))  # Dropout draws from it

    def shares(self, train_units: Tensor, epoch: int) -> list[tuple[Tensor, Tensor]]:
        """This rank's units (target nodes, or graphs) of each of the epoch's global batches, with the batch."""
        generator = torch.Generator(device=train_units.device).manual_seed(stream_seed(self.seed, epoch, ORDER))
        order = torch.randperm(train_units.numel(), generator=generator, device=train_units.device)
        batches = list(train_units[order].split(self.batch_size))
        if len(batches) > 1 and batches[-1].numel() < 2 * self.world:  # batch norm: two rows on every rank
            batches[-2:] = [torch.cat(batches[-2:])]
        return [(batch.tensor_split(self.world)[self.rank], batch) for batch in batches]

    def train_epoch(self, training, train_units: Tensor, epoch: int) -> float:
        """One epoch of DDP steps on this rank's shares; returns the mean over steps of the global batch loss."""
        self.seed_epoch(training, epoch)
        self.network.train()
        sums, sizes = [], []
        for share, batch in self.shares(train_units, epoch):
            loss_sum = training.loss_sum(share, self.network)  # summed over the share's targets
            size = training.num_targets(batch, getattr(training, "train_mask", None))  # the global batch's
            training.optimizer.zero_grad()
            # DDP averages the W ranks' gradients: W / B times each slice's sum makes that average the
            # gradient of the mean loss over the B targets.
            (loss_sum * (self.world / size)).backward()
            training.optimizer_step()
            sums.append(loss_sum.detach())
            sizes.append(size)
        totals = torch.stack(sums).double()  # [steps]
        dist.all_reduce(totals)
        return float((totals / torch.tensor(sizes, dtype=torch.float64, device=totals.device)).mean())

    def predict(self, training, nodes: Tensor, network: nn.Module | None = None) -> Tensor:
        """Outputs [len(nodes), C] in `nodes`' order: each rank predicts a contiguous slice, then all_gather."""
        slices = nodes.tensor_split(self.world)
        return gather_rows(training.predict(slices[self.rank], network), [part.numel() for part in slices])

    def evaluate(self, training, splits: dict[str, tuple[Tensor, Tensor]],
                 network: nn.Module | None = None) -> tuple[Tensor, Tensor]:
        """`training.evaluate` over the ranks: each rank evaluates a contiguous slice of each split's units,
        then all_gather puts the outputs back in order.

        `network`: as `training.evaluate`'s (the bare model, or its moving average: neither runs a collective).
        """
        sliced = {name: (units.tensor_split(self.world)[self.rank], mask) for name, (units, mask) in splits.items()}
        local = training.evaluate(sliced, network)
        counts = {name: [training.num_targets(part, mask) for part in units.tensor_split(self.world)]
                  for name, (units, mask) in splits.items()}
        return gather_rows(local[0], counts["val"]), gather_rows(local[1], counts["test"])


def gather_rows(local: Tensor, counts: list[int]) -> Tensor:
    """Every rank's rows, rank after rank: `local` [counts[rank], ...] from each -> [sum(counts), ...]."""
    padded = local.new_zeros((max(counts), *local.shape[1:]))  # all_gather takes equal shapes
    padded[: local.shape[0]] = local
    parts = [torch.empty_like(padded) for _ in counts]
    dist.all_gather(parts, padded)
    return torch.cat([part[:count] for part, count in zip(parts, counts)])


class _JsonLines(logging.Handler):
    """Writes each record as one marked JSON line on stderr, for `launch` to re-emit in the stage's process."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage() if self.rank == 0 else f"rank {self.rank}: {record.getMessage()}"
        sys.stderr.write(LOG_MARK + json.dumps({"name": record.name, "level": record.levelno, "message": message})
                         + "\n")
        sys.stderr.flush()


def main(argv: list[str]) -> None:
    """One rank, started by torchrun: `python -m sgt_core.train.distributed <launch.json>`."""
    launch_file = Path(argv[0])
    rank = int(os.environ.get("RANK", "0"))
    end_with()  # its parent, torchrun's agent: killed outright, it cannot stop its ranks
    root = logging.getLogger()
    root.handlers[:] = [_JsonLines(rank)]
    root.setLevel(logging.INFO if rank == 0 else logging.WARNING)  # progress once, warnings from all
    try:
        spec = json.loads(launch_file.read_text())
        module, _, function = spec["rank_main"].partition(":")
        rank_main = getattr(importlib.import_module(module), function)  # e.g. sgt_core.train.stage.run_rank
        metrics = rank_main(spec["config"], {name: Path(path) for name, path in spec["inputs"].items()},
                            Path(spec["out_dir"]))
        if rank == 0:
            with atomic_path(launch_file.parent / RESULT_FILE) as partial:
                partial.write_text(json.dumps(metrics))
    except BaseException as error:  # noqa: BLE001 - every failure is reported to the stage's process
        if isinstance(error, KeyboardInterrupt):
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the report short
        report = {"rank": rank, "type": type(error).__name__, "message": str(error),
                  "traceback": traceback.format_exc(), "time": time.time(), "position": current_position()}
        (launch_file.parent / f"rank{rank}.error.json").write_text(json.dumps(report))
        raise SystemExit(1) from None


if __name__ == "__main__":
    main(sys.argv[1:])
