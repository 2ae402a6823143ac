"""AdamW and its warm-up cosine schedule, without the ~70 MB that torch.optim's first use imports."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch


class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019): the update of torch.optim.AdamW, or with
    `decoupled_weight_decay=False` that of torch.optim.Adam with its L2 `weight_decay`.

    Why not torch.optim.AdamW: its base class imports torch._dynamo (and with it sympy) the first time a
    parameter group is added and on every step, which costs ~70 MB of resident memory in each stage
    process, a sixth of the Minesweeper preset's memory budget, for optimizer state that is a few thousand
    numbers here. The arithmetic below is torch's single-tensor AdamW, step for step (tests/test_schedules.py
    checks it against torch.optim.AdamW); each parameter counts its own steps, so one that gets no
    gradient in a step is left untouched, as in torch.

    Args:
        parameters: the tensors to optimise (those without requires_grad are ignored), or torch's parameter
            groups: dicts of "params" and optionally their own "weight_decay".
        lr: learning rate (the schedule below rescales `lr` from `base_lr`).
        weight_decay: the weight decay's factor (of every group that does not set its own).
        betas, eps: Adam's moment decay rates and denominator epsilon.
        decoupled_weight_decay: True (AdamW) shrinks every weight by lr * weight_decay per step; False
            adds weight_decay * w to the gradient before Adam's moments (torch.optim.Adam's L2, what GCN and
            GAT train with). Through Adam's normalisation that L2 pulls a weight whose own gradient is
            rare, such as that of a bag-of-words feature few training nodes have, towards 0 at nearly the
            full learning rate, while AdamW shrinks it by only lr * weight_decay.
    """

    def __init__(
        self,
        parameters: Iterable[torch.Tensor],
        lr: float,
        weight_decay: float = 1e-2,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        decoupled_weight_decay: bool = True,
    ) -> None:
        groups = [{**group, "params": list(group["params"])} if isinstance(group, dict) else {"params": [group]}
                  for group in parameters]
        trained = [(p, group.get("weight_decay", weight_decay)) for group in groups for p in group["params"]
                   if p.requires_grad]
        self.parameters = [p for p, _ in trained]
        self.weight_decays = [decay for _, decay in trained]
        self.base_lr = self.lr = lr
        self.weight_decay, self.betas, self.eps = weight_decay, betas, eps
        self.decoupled_weight_decay = decoupled_weight_decay
        self.exp_avg = [torch.zeros_like(p) for p in self.parameters]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.parameters]
        self.steps = [0] * len(self.parameters)

    def zero_grad(self) -> None:
        """Drops the gradients (torch's `set_to_none=True`), so the next backward allocates them afresh."""
        for parameter in self.parameters:
            parameter.grad = None

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.betas
        for index, (parameter, weight_decay, exp_avg, exp_avg_sq) in enumerate(
            zip(self.parameters, self.weight_decays, self.exp_avg, self.exp_avg_sq)
        ):
            if parameter.grad is None:
                continue
            grad = parameter.grad
            self.steps[index] += 1
            step = self.steps[index]
            if self.decoupled_weight_decay:
                parameter.mul_(1 - self.lr * weight_decay)
            elif weight_decay:
                grad = grad.add(parameter, alpha=weight_decay)
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denominator = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2**step)).add_(self.eps)
            parameter.addcdiv_(exp_avg, denominator, value=-self.lr / (1 - beta1**step))


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
