"""The wide network on several processes: torchrun starts the ranks, DistributedDataParallel joins them.

`launcher` holds what runs in the stage's process (and in `sgt ddp-node`), `ranks` what runs in each rank;
torchrun starts a rank as `python -m sgt_core.train.distributed <launch.json>` (this package's __main__).

With `train.distributed.nproc_per_node` x `nnodes` > 1 the train stage does not train in its own process:

1. `launch` (`launcher`, in the stage's process) writes the config and the input and output folders to
   `<out_dir>/_distributed/launch.json`, runs torch's launcher on it,
   `python -m torch.distributed.run --nnodes M --nproc-per-node N (--standalone | --rdzv-backend c10d
   --rdzv-endpoint E --rdzv-id ID) -m sgt_core.train.distributed <launch.json>`, and waits. torchrun's
   elastic agent starts the N local ranks, restarts none (`--max-restarts 0`) and stops the others when
   one fails; every further node runs the same command (the stage logs it) and meets at the endpoint.
2. Each rank (`ranks.main`, then the function `launch` was given: `sgt_core.train.stage.run_rank`, named in the
   launch file, so this module never imports the stage's) joins the default process group (gloo on the
   CPU, NCCL on CUDA with one GPU per local rank), loads the inputs, builds the same network from the
   same seed and trains it under DistributedDataParallel on its share of every global batch (`ranks.Ranks`).
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

from sgt_core.train.distributed.launcher import (
    LAUNCH_DIR,
    LAUNCH_FILE,
    DistributedTrainingError,
    join_launches,
    launch,
    pending_launches,
    rank_environment,
    torchrun_command,
    world_size,
)
from sgt_core.train.distributed.ranks import Ranks, gather_rows, stream_seed

__all__ = ["LAUNCH_DIR", "LAUNCH_FILE", "DistributedTrainingError", "Ranks", "gather_rows", "join_launches", "launch",
           "pending_launches", "rank_environment", "stream_seed", "torchrun_command", "world_size"]
