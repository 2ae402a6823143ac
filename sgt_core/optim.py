"""AdamW, Adam and their warm-up cosine schedule, without the ~70 MB that torch.optim's first use imports."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch


class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019): the update of torch.optim.AdamW.

    Why not torch.optim.AdamW: its base class imports torch._dynamo (and with it sympy) the first time a
    parameter group is added and on every step, which costs ~70 MB of resident memory in each stage
    process, a sixth of the Minesweeper preset's memory budget, for optimizer state that is a few thousand
    numbers here. The arithmetic below is torch's single-tensor AdamW, step for step (tests/test_schedules.py
    checks it against torch.optim.AdamW); each parameter counts its own steps, so one that gets no
    gradient in a step is left untouched, as in torch. `Adam` below differs only in its weight decay.

    Args:
        parameters: the tensors to optimise (those without requires_grad are ignored), or torch's parameter
            groups: dicts of "params" and optionally their own "weight_decay".
        lr: learning rate (the schedule below rescales `lr` from `base_lr`).
        weight_decay: the weight decay's factor (of every group that does not set its own): every weight
            shrinks by lr * weight_decay per step.
        betas: Adam's decay rates of the first and second moment estimates.
        eps: Adam's denominator epsilon.
    """

    def __init__(
        self,
        parameters: Iterable[torch.Tensor],
        lr: float,
        weight_decay: float = 1e-2,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        groups = [{**group, "params": list(group["params"])} if isinstance(group, dict) else {"params": [group]}
                  for group in parameters]
        trained = [(p, group.get("weight_decay", weight_decay)) for group in groups for p in group["params"]
                   if p.requires_grad]
        self.parameters = [p for p, _ in trained]
        self.weight_decays = [decay for _, decay in trained]
        self.base_lr = self.lr = lr
        self.weight_decay, self.betas, self.eps = weight_decay, betas, eps
        self.steps = [0] * len(self.parameters)
        # The moments live in one flat buffer each, every parameter's a view of it: the usual step (every
        # parameter has a gradient, all at the same step count, one weight decay) is then one op per update
        # term over the flat buffers (`_flat_step`) instead of one per parameter and term. On the CPU torch's
        # _foreach_ ops loop over the tensors one by one, which on a network of ~100 small tensors cost more
        # than the arithmetic.
        like = self.parameters[0] if self.parameters else None
        self._flat = like is not None and all(p.dtype == like.dtype and p.device == like.device for p in self.parameters)
        if self._flat:
            sizes = [p.numel() for p in self.parameters]
            self._exp_avg, self._exp_avg_sq, self._flat_parameters, self._flat_grads = (
                like.new_zeros(sum(sizes)) for _ in range(4))

            def views(flat: torch.Tensor) -> list[torch.Tensor]:
                return [part.view_as(p) for part, p in zip(flat.split(sizes), self.parameters)]

            self.exp_avg, self.exp_avg_sq = views(self._exp_avg), views(self._exp_avg_sq)
            self._parameter_views, self._grad_views = views(self._flat_parameters), views(self._flat_grads)
        else:
            self.exp_avg = [torch.zeros_like(p) for p in self.parameters]
            self.exp_avg_sq = [torch.zeros_like(p) for p in self.parameters]

    def zero_grad(self) -> None:
        """Drops the gradients (torch's `set_to_none=True`), so the next backward allocates them afresh."""
        for parameter in self.parameters:
            parameter.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient, all at once (torch's multi-tensor `_foreach_`
        operations: per element the single-tensor arithmetic, without one Python round per parameter,
        which on a network of many small tensors and batches of small graphs was most of the step)."""
        beta1, beta2 = self.betas
        stepped = [index for index, parameter in enumerate(self.parameters) if parameter.grad is not None]
        if not stepped:
            return
        if (self._flat and len(stepped) == len(self.parameters) and len(set(self.steps)) == 1
                and len(set(self.weight_decays)) == 1):
            self.steps = [step + 1 for step in self.steps]
            self._flat_step(self.steps[0], self.weight_decays[0])
            return
        for index in stepped:
            self.steps[index] += 1
        parameters = [self.parameters[i] for i in stepped]
        grads = [self.parameters[i].grad for i in stepped]
        exp_avg = [self.exp_avg[i] for i in stepped]
        exp_avg_sq = [self.exp_avg_sq[i] for i in stepped]
        decays = [self.weight_decays[i] for i in stepped]
        steps = [self.steps[i] for i in stepped]
        grads = self._decay(parameters, grads, decays)
        torch._foreach_lerp_(exp_avg, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sq, beta2)
        torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - beta2)
        denominators = torch._foreach_sqrt(exp_avg_sq)
        torch._foreach_div_(denominators, [math.sqrt(1 - beta2**step) for step in steps])
        torch._foreach_add_(denominators, self.eps)
        torch._foreach_addcdiv_(parameters, exp_avg, denominators, [-self.lr / (1 - beta1**step) for step in steps])

    def _flat_step(self, step: int, decay: float) -> None:
        """`step`'s update on the flat buffers: the same arithmetic per element as the per-parameter ops (on
        the CPU those run each tensor through the same kernels), so either path gives the same bits."""
        beta1, beta2 = self.betas
        torch._foreach_copy_(self._parameter_views, self.parameters)
        torch._foreach_copy_(self._grad_views, [p.grad for p in self.parameters])
        parameters, grads = self._flat_parameters, self._flat_decay(self._flat_parameters, self._flat_grads, decay)
        self._exp_avg.lerp_(grads, 1 - beta1)
        self._exp_avg_sq.mul_(beta2).addcmul_(grads, grads, value=1 - beta2)
        denominator = self._exp_avg_sq.sqrt().div_(math.sqrt(1 - beta2**step)).add_(self.eps)
        parameters.addcdiv_(self._exp_avg, denominator, value=-self.lr / (1 - beta1**step))
        torch._foreach_copy_(self.parameters, self._parameter_views)

    def _flat_decay(self, parameters: torch.Tensor, grads: torch.Tensor, decay: float) -> torch.Tensor:
        """`_decay` on the flat buffers, one decay for all."""
        parameters.mul_(1 - self.lr * decay)
        return grads

    def _decay(self, parameters: list[torch.Tensor], grads: list[torch.Tensor], decays: list[float]) -> list:
        """AdamW's decoupled decay: w <- (1 - lr * decay) w before the update; the gradients as they are."""
        torch._foreach_mul_(parameters, [1 - self.lr * decay for decay in decays])
        return grads


class Adam(AdamW):
    """Adam (Kingma & Ba, 2015) with its L2 weight decay: the update of torch.optim.Adam(weight_decay=...).

    `weight_decay * w` joins the gradient before Adam's moments, what GCN and GAT train with. Through
    Adam's normalisation that L2 pulls a weight whose own gradient is rare, such as that of a bag-of-words
    feature few training nodes have, towards 0 at nearly the full learning rate, while AdamW shrinks it by
    only lr * weight_decay. The arguments and everything else are `AdamW`'s.
    """

    def _flat_decay(self, parameters: torch.Tensor, grads: torch.Tensor, decay: float) -> torch.Tensor:
        """`_decay` on the flat buffers: the gradients there are the optimiser's copy, so in place."""
        return grads.add_(parameters * decay) if decay else grads

    def _decay(self, parameters: list[torch.Tensor], grads: list[torch.Tensor], decays: list[float]) -> list:
        """L2: g <- g + decay * w (new tensors: the parameters' .grad stay as backward left them)."""
        if any(decays):
            grads = torch._foreach_add(grads, torch._foreach_mul(parameters, decays))
        return grads


# The `optimizer` group's choices (`optimizer.name`): its other keys are the class's arguments.
OPTIMIZERS = {"adamw": AdamW, "adam": Adam}


class CosineWithWarmup:
    """Linear warm-up over `warmup_epochs`, then cosine decay to zero at `epochs` (stepped per epoch).

    Sets `optimizer.lr` to `optimizer.base_lr` times the factor of the current epoch, starting at epoch 0.
    """

    def __init__(self, optimizer: AdamW, warmup_epochs: int, epochs: int) -> None:
        self.optimizer, self.warmup_epochs, self.epochs = optimizer, warmup_epochs, epochs
        self.epoch = 0
        optimizer.lr = optimizer.base_lr * self.factor(0)

    def factor(self, epoch: int) -> float:
        if epoch < self.warmup_epochs:
            return (epoch + 1) / (self.warmup_epochs + 1)
        progress = (epoch - self.warmup_epochs) / max(1, self.epochs - self.warmup_epochs)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    def step(self) -> None:
        self.epoch += 1
        self.optimizer.lr = self.optimizer.base_lr * self.factor(self.epoch)
