"""DDP training, the stage's side: the launch file, torchrun's command (also for further nodes, `sgt ddp-node`),
and the rank error that a failed run raises."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from sgt_core.artifacts import ArtifactError
from sgt_core.errors import ConfigError, DatasetError, SGTError
from sgt_core.lifeline import parent_death_signal
from sgt_core.numerics import NonFiniteLossError
from sgt_core.progress import note_position
from sgt_core.train.distributed.ranks import LOG_MARK, RESULT_FILE

log = logging.getLogger(__name__)

LAUNCH_DIR = "_distributed"  # inside the stage's folder while the ranks run; removed before it is published
LAUNCH_FILE = "launch.json"
RANK_MODULE = __package__  # what torchrun runs in each rank: the package's __main__, `ranks.main`
HEAR_S = 0.5  # how long an interrupted torchrun has to end by itself before it is interrupted
STOP_GRACE_S = 10.0  # how long it then has to stop its ranks before SIGKILL (the flow waits 15 s for the stage)
# Errors a rank raises that the stage re-raises as the same type (one line for the CLI, no traceback).
USER_ERRORS = {cls.__name__: cls for cls in (SGTError, ConfigError, DatasetError, NonFiniteLossError, ArtifactError)}


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



def torchrun_command(distributed: dict, launch_file: Path, run_id: str) -> list[str]:
    """The launcher's command line: the same on every node."""
    if distributed["rdzv_endpoint"] is None:
        rendezvous = ["--standalone"]  # a local c10d store on a free port: one node
    else:
        rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", distributed["rdzv_endpoint"], "--rdzv-id", run_id]
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(distributed["nnodes"]),
            "--nproc-per-node", str(distributed["nproc_per_node"]), *rendezvous, "--max-restarts", "0",
            "-m", RANK_MODULE, str(launch_file)]


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
