"""DDP training, each rank's side: joining the process group, sharing out every global batch, gathering the
evaluated rows, and reporting back to the stage's process (`main`, which torchrun runs)."""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from sgt_core.artifacts import atomic_path
from sgt_core.errors import ConfigError
from sgt_core.lifeline import end_with
from sgt_core.progress import current_position
from sgt_core.train.sync_batch_norm import SyncBatchNorm1d

RESULT_FILE = "result.json"  # rank 0's metrics, beside the launch file
LOG_MARK = "sgt-rank-log "  # a rank's log record on its stderr, re-emitted by `launch` under its logger
ORDER, SAMPLING, DROPOUT = 0, 1, 2  # the random streams of an epoch
EVALUATION = 3  # evaluation's own sampling stream (GraphSetTraining.evaluate), the same every epoch


def stream_seed(seed: int, epoch: int, stream: int, rank: int = 0) -> int:
    """A seed for one random stream of one epoch (and rank), independent of the others (NumPy's SeedSequence)."""
    state = np.random.SeedSequence([seed, epoch, stream, rank]).generate_state(1, np.uint64)[0]
    return int(state >> np.uint64(1))  # below 2^63: a valid seed for every torch generator


@dataclass
class Ranks:
    """This process's place among the ranks, and what training does differently there.

    Attributes:
        rank: this rank.
        world: the number of ranks.
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

    def evaluate(self, training, splits: dict[str, tuple[Tensor, Tensor]], network: nn.Module | None = None,
                 wants_test=None) -> tuple[Tensor, Tensor | None]:
        """`training.evaluate` over the ranks: each rank evaluates a contiguous slice of each split's units,
        then all_gather puts the outputs back in order.

        `network`: as `training.evaluate`'s (the bare model, or its moving average: neither runs a collective).
        `wants_test`: as `training.evaluate`'s, called with every rank's validation outputs gathered, so that
        every rank decides alike whether the test split is predicted (and gathered).
        """
        sliced = {name: (units.tensor_split(self.world)[self.rank], mask) for name, (units, mask) in splits.items()}
        counts = {name: [training.num_targets(part, mask) for part in units.tensor_split(self.world)]
                  for name, (units, mask) in splits.items()}
        gathered = {}

        def gathered_wants_test(local_val: Tensor) -> bool:
            gathered["val"] = gather_rows(local_val, counts["val"])
            return wants_test is None or wants_test(gathered["val"])

        _, local_test = training.evaluate(sliced, network, gathered_wants_test)
        return gathered["val"], None if local_test is None else gather_rows(local_test, counts["test"])


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
