"""The wide network on DDP: 2 gloo processes train and evaluate exactly as 1 process with the same samples.

The ranks are real: two processes (torch.multiprocessing, spawned) joined by a gloo process group for the
equivalence, and torchrun started by the train stage for the end-to-end tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from sgt_core.errors import ConfigError
from sgt_core.layers import SampledLayer
from sgt_core.optim import AdamW, CosineWithWarmup
from sgt_core.seeding import seed_everything
from sgt_core.train.distributed import (
    LAUNCH_DIR,
    LAUNCH_FILE,
    Ranks,
    pending_launches,
    rank_environment,
)
from sgt_core.train.stage import WideNetworkTraining, _read_inputs, run_train
from tests.conftest import free_port
from tests.stage_runner import run_stages

REPO_ROOT = Path(__file__).resolve().parents[2]
BATCH = 16  # the global batch B: 8 target nodes per rank
EPOCHS = 3  # 72 training nodes: 5 global batches an epoch, 15 optimiser steps in all
WORLD = 2
# No dropout: "the same samples" then fix every random draw of a step (dropout masks differ per rank).
OVERRIDES = [f"train.batch_size={BATCH}", "model.dropout=0", f"train.epochs={EPOCHS}"]
EMA_DECAY = 0.5  # `train.ema_decay`: the ranks keep the same moving average of the weights as one process


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> tuple[dict, dict[str, Path]]:
    cfg, outputs, _ = run_stages(tmp_path_factory.mktemp("ddp"), OVERRIDES, until="export")
    return cfg, {name: outputs[name] for name in ("preprocess", "export")}


def _build_in_float64(cfg: dict, graph, scores, device: torch.device | str = "cpu") -> WideNetworkTraining:
    """The stage's training set-up on `device`, computing in float64 (the torch kernels; the sampler is unchanged).

    Batch norm makes some parameters gradient-free (a bias just before it, a key bias under the softmax):
    their exact gradient is 0, which float32 rounds to noise of either sign, and Adam divides that noise by
    its equally tiny second moment into steps of about lr. Two correct computations that add in different
    orders then drift apart on those parameters by ~lr per step. In float64 the noise stays far below
    Adam's eps, so every parameter is comparable at the issue's tolerance.
    """
    training = WideNetworkTraining.build(cfg, graph, scores, torch.device(device))
    training.model.double()
    training.x = training.x.double()
    training.optimizer = AdamW(training.model.parameters(), lr=cfg["optimizer"]["lr"],
                               weight_decay=cfg["optimizer"]["weight_decay"])
    return training


def _train_rank(rank: int, port: int, cfg: dict, inputs: dict[str, Path], out: Path) -> None:
    """One of the two ranks: DDP training as the train stage runs it, recording every batch it samples."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD),
                      LOCAL_RANK=str(rank), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    seed_everything(cfg["seed"])
    ranks = Ranks.join(cfg, torch.device("cpu"))
    try:
        graph, scores = _read_inputs(cfg, inputs)
        training = _build_in_float64(cfg, graph, scores)
        scheduler = CosineWithWarmup(training.optimizer, cfg["train"]["warmup_epochs"], EPOCHS)
        ranks.attach(training)
        training.average_weights(EMA_DECAY)
        samples, sample = [], training.sampler.batch

        def recording(targets):
            batch = sample(targets)
            samples.append((epoch, targets, *batch))
            return batch

        training.sampler.batch = recording
        train_nodes = graph.train_mask.nonzero().flatten()
        losses = []
        for epoch in range(EPOCHS):
            losses.append(ranks.train_epoch(training, train_nodes, epoch))
            scheduler.step()
        training.sampler.batch = sample
        # Evaluation keeping every neighbour: the same samples whatever the batches, so comparable to one process.
        training.sampler.degrees = [int(graph.ptr.diff().max())] * len(training.sampler.degrees)
        training.model.eval()
        eval_nodes = torch.cat([graph.val_mask.nonzero().flatten(), graph.test_mask.nonzero().flatten()])
        with torch.no_grad():
            logits = ranks.predict(training, eval_nodes)
        torch.save({"state": training.model.state_dict(), "averaged": training.evaluated.state_dict(),
                    "samples": samples, "losses": losses, "logits": logits}, out / f"rank{rank}.pt")
    finally:
        ranks.leave()


def _merge(batches: list[tuple[torch.Tensor, list[SampledLayer]]]) -> tuple[torch.Tensor, list[SampledLayer]]:
    """The ranks' batches as one batch of one process: their layers side by side, rows renumbered."""
    inputs = torch.cat([input_nodes for input_nodes, _ in batches])
    rows = [input_nodes.numel() for input_nodes, _ in batches]  # each rank's input rows of the current layer
    merged = []
    for layer in range(len(batches[0][1])):
        parts = [layers[layer] for _, layers in batches]
        starts = torch.tensor([0, *rows[:-1]]).cumsum(0).tolist()
        spd = None if parts[0].neighbour_spd is None else torch.cat([part.neighbour_spd for part in parts])
        merged.append(SampledLayer(
            queries=torch.cat([part.queries + start for part, start in zip(parts, starts)]),
            neighbours=torch.cat([part.neighbours + start for part, start in zip(parts, starts)]),
            neighbour_type=torch.cat([part.neighbour_type for part in parts]),
            neighbour_mask=torch.cat([part.neighbour_mask for part in parts]),
            neighbour_spd=spd,
        ))
        rows = [part.queries.numel() for part in parts]
    return inputs, merged


def test_two_gloo_ranks_train_and_evaluate_as_one_process_with_their_samples(upstream, tmp_path):
    cfg, inputs = upstream
    mp.spawn(_train_rank, args=(free_port(), cfg, inputs, tmp_path), nprocs=WORLD, join=True)
    results = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=False) for rank in range(WORLD)]
    for key, value in results[0]["state"].items():  # DDP keeps the replicas identical, and their averages
        assert torch.equal(value, results[1]["state"][key]), key
        assert torch.equal(results[0]["averaged"][key], results[1]["averaged"][key]), key

    # One process, batch B, the same samples: each step's batch holds both ranks' sampled neighbourhoods.
    seed_everything(cfg["seed"])
    graph, scores = _read_inputs(cfg, inputs)
    single = _build_in_float64(cfg, graph, scores)
    initial = {key: value.clone() for key, value in single.model.state_dict().items()}
    single.average_weights(EMA_DECAY)
    scheduler = CosineWithWarmup(single.optimizer, cfg["train"]["warmup_epochs"], EPOCHS)
    single.batch_size = 10**9  # the merged batch is one chunk
    steps = list(zip(results[0]["samples"], results[1]["samples"]))
    train_count = int(graph.train_mask.sum())
    assert len(steps) == EPOCHS * -(-train_count // BATCH) >= 2 * EPOCHS
    losses = []
    for epoch in range(EPOCHS):
        single.model.train()
        epoch_losses, targets = [], 0
        for first, second in steps:
            if first[0] != epoch:
                continue
            assert second[0] == epoch and abs(first[1].numel() - second[1].numel()) <= 1
            targets += first[1].numel() + second[1].numel()
            merged = _merge([first[2:], second[2:]])
            single.sampler.batch = lambda targets, merged=merged: merged
            epoch_losses.append(single._step(torch.cat([first[1], second[1]])))
        assert targets == train_count  # every training node once an epoch
        losses.append(sum(epoch_losses) / len(epoch_losses))
        scheduler.step()
    assert losses == pytest.approx(results[0]["losses"], abs=1e-5)
    moved = 0.0
    for key, value in single.model.state_dict().items():
        torch.testing.assert_close(results[0]["state"][key], value, rtol=0, atol=1e-5, msg=key)
        moved = max(moved, float((value.double() - initial[key].double()).abs().max()))
    assert moved > 1e-2  # the steps changed the weights far beyond the tolerance
    for key, value in single.evaluated.state_dict().items():
        torch.testing.assert_close(results[0]["averaged"][key], value, rtol=0, atol=1e-5, msg=key)
        assert key.endswith("num_batches_tracked") or not torch.equal(value, single.model.state_dict()[key]), key

    # The gathered evaluation: every evaluated node once, in order, as one process predicts it.
    del single.sampler.batch  # its own sampling again
    single.sampler.degrees = [int(graph.ptr.diff().max())] * len(single.sampler.degrees)
    single.batch_size = BATCH
    single.model.eval()
    eval_nodes = torch.cat([graph.val_mask.nonzero().flatten(), graph.test_mask.nonzero().flatten()])
    with torch.no_grad():
        expected = single.predict(eval_nodes)
    assert results[0]["logits"].shape == expected.shape
    assert torch.equal(results[0]["logits"], results[1]["logits"])
    torch.testing.assert_close(results[0]["logits"], expected, rtol=0, atol=1e-5)


def _distributed(cfg: dict, **changes) -> dict:
    train = {**cfg["train"], "distributed": {"nproc_per_node": WORLD, "nnodes": 1, "rdzv_endpoint": None}}
    return {**cfg, "train": train, **changes}


def test_the_stage_trains_through_torchrun_and_writes_what_one_process_writes(upstream, tmp_path):
    cfg, inputs = upstream
    cfg = {**cfg, "train": {**cfg["train"], "ema_decay": EMA_DECAY}}  # the ranks evaluate the moving average
    single_dir, first_dir, second_dir = (tmp_path / name for name in ("single", "first", "second"))
    for folder in (single_dir, first_dir, second_dir):
        folder.mkdir()
    single = run_train(cfg, inputs, single_dir)
    first = run_train(_distributed(cfg), inputs, first_dir)
    second = run_train(_distributed(cfg), inputs, second_dir)

    assert sorted(path.name for path in first_dir.iterdir()) == sorted(path.name for path in single_dir.iterdir())
    assert not (first_dir / LAUNCH_DIR).exists()
    assert first.keys() == single.keys() and first["device"] == "cpu"
    assert 0 <= first["test_roc_auc"] <= 1 and first["best_epoch"] in range(EPOCHS)
    history = json.loads((first_dir / "history.json").read_text())
    assert [row["epoch"] for row in history] == list(range(EPOCHS))
    checkpoint = torch.load(first_dir / "model.pt", weights_only=True)
    assert checkpoint["state_dict"].keys() == torch.load(single_dir / "model.pt", weights_only=True)["state_dict"].keys()
    # Seeded per rank and epoch: the same run again gives the same history and metrics.
    assert history == json.loads((second_dir / "history.json").read_text())
    assert {k: v for k, v in first.items() if not k.startswith("seconds")} == {
        k: v for k, v in second.items() if not k.startswith("seconds")}


def test_a_failing_rank_is_one_clear_error(upstream, tmp_path):
    cfg, inputs = upstream
    wrong = _distributed(cfg, model={**cfg["model"], "num_layers": 3, "degrees": [6, 4, 4]})
    with pytest.raises(ConfigError, match="the scores have 2 layers but model.num_layers is 3"):
        run_train(wrong, inputs, tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing written, the launch folder removed


@pytest.mark.e2e  # a second torchrun launch; make test keeps the one-node DDP tests
def test_a_second_node_joins_through_sgt_ddp_node_at_the_same_endpoint(upstream, tmp_path):
    """Two torchrun "nodes" of one process each, on this machine, meeting at a c10d rendezvous endpoint.

    The second node is `sgt ddp-node`, started before the stage as on a real second machine: it finds the
    stage's launch file under <artifacts>/train and runs torchrun with the stage's command.
    """
    cfg, inputs = upstream
    endpoint = f"127.0.0.1:{free_port()}"
    distributed = {"nproc_per_node": 1, "nnodes": 2, "rdzv_endpoint": endpoint}
    two_nodes = {**cfg, "train": {**cfg["train"], "distributed": distributed}}
    stage_dir = tmp_path / "artifacts" / "train" / ".tmp-0123456789abcdef-run"
    stage_dir.mkdir(parents=True)
    second_node = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "ddp-node", "--rdzv-endpoint", endpoint, "--once",
         f"paths.artifacts={tmp_path / 'artifacts'}"],
        cwd=REPO_ROOT, env=rank_environment(1), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        metrics = run_train(two_nodes, inputs, stage_dir)
        output, _ = second_node.communicate(timeout=180)
    finally:
        if second_node.poll() is None:
            second_node.kill()
    assert second_node.returncode == 0, output[-3000:]
    assert "joining the train stage" in output
    assert metrics["best_epoch"] in range(EPOCHS)
    assert sorted(path.name for path in stage_dir.iterdir()) == ["history.json", "model.pt", "sampled_degrees.json"]


def test_sgt_ddp_node_joins_only_runs_at_its_endpoint(tmp_path):
    """A launch file at another endpoint, or of a one-node run, is not joined; one at the endpoint is."""
    train_dir = tmp_path / "train"
    for name, nnodes, endpoint in [("a", 2, "10.0.0.1:29400"), ("b", 2, "10.0.0.2:29400"), ("c", 1, None)]:
        folder = train_dir / f".tmp-{name}" / LAUNCH_DIR
        folder.mkdir(parents=True)
        distributed = {"nproc_per_node": 1, "nnodes": nnodes, "rdzv_endpoint": endpoint}
        (folder / LAUNCH_FILE).write_text(json.dumps({"config": {"train": {"distributed": distributed}}}))
    (train_dir / ".tmp-d" / LAUNCH_DIR).mkdir(parents=True)
    (train_dir / ".tmp-d" / LAUNCH_DIR / LAUNCH_FILE).write_text("{")  # being written
    assert list(pending_launches(train_dir, "10.0.0.1:29400")) == [train_dir / ".tmp-a" / LAUNCH_DIR / LAUNCH_FILE]
