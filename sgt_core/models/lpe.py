"""LearnedPositionalEncoding: SAN's node-wise learned positional encoding from the Laplacian spectrum."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sgt_core.errors import ConfigError
from sgt_core.models.dropout import as_bytes


class LearnedPositionalEncoding(nn.Module):
    r"""Node-wise learned positional encoding (LPE) of SAN (Kreuzer et al., 2021, "Rethinking Graph
    Transformers with Spectral Attention", section 3 and Figure 5, https://arxiv.org/abs/2106.03893).

    Node j sees its part of the spectrum as a sequence of m tokens, one per eigenpair: the eigenvalue
    λ_i (its position on the frequency axis) and the node's entry φ_{i,j} of the eigenvector. Then

    \[
    t_{j,i} = W\,[\lambda_i,\ s_i\,\phi_{i,j}] + b, \qquad
    (z_{j,1}, \dots, z_{j,m}) = \mathrm{TransformerEncoder}(t_{j,1}, \dots, t_{j,m}), \qquad
    \mathrm{LPE}_j = \sum_{i \,:\, \mathrm{mask}_{j,i}} z_{j,i},
    \]

    where padded tokens (graphs with fewer than m eigenpairs) are hidden from attention and left out of
    the sum. s_i = ±1 is a random sign per eigenvector, shared by all nodes and drawn from torch's global
    generator on every training forward (s_i = 1 in eval mode): eigenvectors are only defined up to sign,
    and SAN's node-wise LPE is not sign invariant, so it learns invariance from random flips. The result
    is concatenated to the node features by the caller.

    Nodes are the batch dimension of the encoder, so the module is permutation equivariant over nodes;
    its cost is O(N m^2 k). The encoder has no dropout and a feed-forward width of 2k (PyTorch's default
    of 2048 would dominate the cost for k around 16).

    A row with no valid token gives a zero vector (its padding attends to itself instead of an empty,
    NaN-producing softmax, and is then dropped by the masked sum).

    Args:
        m: eigenpairs per node (sequence length).
        k: embedding width (must be divisible by ``heads``).
        layers: Transformer encoder layers.
        heads: attention heads.

    Shapes:
        eigenvalues [N, m], eigenvectors [N, m], mask [N, m] bool (True = real eigenpair) -> [N, k].
    """

    def __init__(self, m: int, k: int, layers: int = 1, heads: int = 2) -> None:
        super().__init__()
        if m < 1 or k < 1 or layers < 1 or heads < 1:
            raise ConfigError(f"LPE sizes must be >= 1; got m={m}, k={k}, layers={layers}, heads={heads}")
        if k % heads:
            raise ConfigError(f"LPE width k={k} is not divisible by heads={heads}")
        self.m, self.k, self.layers, self.heads = m, k, layers, heads
        self.embed = nn.Linear(2, k)  # (λ_i, φ_{i,j}) -> k
        layer = nn.TransformerEncoderLayer(
            d_model=k, nhead=heads, dim_feedforward=2 * k, dropout=0.0, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.embed.reset_parameters()
        # nn.TransformerEncoder deep-copies one layer, so its layers start identical: re-draw each.
        for layer in self.encoder.layers:
            layer.self_attn._reset_parameters()
            for sub in (layer.linear1, layer.linear2, layer.norm1, layer.norm2):
                sub.reset_parameters()

    def forward(self, eigenvalues: Tensor, eigenvectors: Tensor, mask: Tensor) -> Tensor:
        expected = (eigenvalues.shape[0], self.m)
        for name, t in (("eigenvalues", eigenvalues), ("eigenvectors", eigenvectors), ("mask", mask)):
            if tuple(t.shape) != expected:
                raise ValueError(
                    f"LearnedPositionalEncoding: {name} must have shape [N, m={self.m}] = {expected}; "
                    f"got {tuple(t.shape)}"
                )
        if mask.dtype != torch.bool:
            raise ValueError(f"LearnedPositionalEncoding: mask must be bool; got {mask.dtype}")

        if self.training:
            signs = torch.randint(0, 2, (self.m,), device=eigenvectors.device) * 2 - 1  # [m], ±1
            eigenvectors = eigenvectors * signs.to(eigenvectors.dtype)  # [N, m]

        tokens = torch.stack([eigenvalues, eigenvectors], dim=-1)  # [N, m, 2]
        tokens = tokens.masked_fill(~mask.unsqueeze(-1), 0.0)  # [N, m, 2]
        h = self.embed(tokens)  # [N, m, k]
        # True = ignored by attention. Fully padded rows would have every score at -inf (NaN softmax),
        # so they attend over their padding instead; the masked sum below discards it.
        ignore = ~mask & mask.any(dim=1, keepdim=True)  # [N, m]
        if not torch.is_grad_enabled():  # the library's fused inference path, the faster one without gradients
            h = self.encoder(h, src_key_padding_mask=ignore)  # [N, m, k]
        else:
            hidden = h.new_zeros(ignore.shape).masked_fill_(ignore, float("-inf"))[:, None, None, :]  # [N, 1, 1, m]
            for layer in self.encoder.layers:
                h = self._encoder_layer(layer, h, hidden)  # [N, m, k]
        h = h * as_bytes(mask).unsqueeze(-1)  # [N, m, k] padding's rows (finite, from the norm) to zero
        return h.sum(dim=1)  # [N, k]

    def _encoder_layer(self, layer: nn.TransformerEncoderLayer, h: Tensor, hidden: Tensor) -> Tensor:
        """`layer`'s computation (post-norm, ReLU, no dropout: how __init__ builds it) with its own weights, as
        two small batched products per node. With gradients, nn.MultiheadAttention's batch-first path
        transposes to [m, N, k] and back and runs a flash kernel made for long sequences, slower than these
        at m of about 8; without them the library's fused inference path is the faster, and `forward` uses it.

        Shapes:
            h [N, m, k], hidden float [N, 1, 1, m] 0 or -inf (a token hidden from attention) -> [N, m, k].
        """
        num_rows, length, width = h.shape
        attention, head_dim = layer.self_attn, width // self.heads
        qkv = F.linear(h, attention.in_proj_weight, attention.in_proj_bias)  # [N, m, 3k]
        query, key, value = qkv.view(num_rows, length, 3, self.heads, head_dim).unbind(2)  # [N, m, H, dh] x3
        scores = torch.einsum("nihd,njhd->nhij", query, key) * head_dim**-0.5 + hidden  # [N, H, m, m]
        attended = torch.einsum("nhij,njhd->nihd", scores.softmax(-1), value)  # [N, m, H, dh]
        h = layer.norm1(h + attention.out_proj(attended.reshape(num_rows, length, width)))
        return layer.norm2(h + layer.linear2(F.relu(layer.linear1(h))))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(m={self.m}, k={self.k}, layers={self.layers}, heads={self.heads})"
