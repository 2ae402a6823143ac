"""The `sampler` group: how the wide network's neighbours are drawn each epoch (conf/sampler/*.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from sgt_core.config.section import Section, checked, one_of

# One option file each in conf/sampler/; `sgt_core.sampling.TRAIN_SAMPLERS` holds the same (a test checks).
# reservoir: Algorithm 1 (the default); uniform ignores the scores; topk keeps the highest; full: no
# sampling, every layer attends over the whole interaction graph (Exphormer-style baseline).
METHODS: tuple[str, ...] = ("reservoir", "uniform", "topk", "full")


@dataclass(frozen=True)
class SamplerConfig(Section):
    """`sampler`: `LayerSampler`'s `method` (its `degrees` are `model.degrees`)."""

    PATH = "sampler"

    method: str = checked(one_of(*METHODS))


# Why one graph refuses train.batch_size with sampler=full (said by the config and by the training set-up).
FULL_ATTENTION_ON_ONE_GRAPH = "must be null with sampler=full on one graph, which attends over whole neighbourhoods"
