"""Attention as PyTorch computes it, for a Python ``[reference]``: cudafuzz calls ``attention``
on dense copies of the case's inputs, once in float64 (the gold) and once in the case's own
type (the same-precision baseline), and judges the kernel's ``o`` against both.

The convention is the built-in ``attention_fwd``'s: grouped-query heads (``heads_q`` a multiple
of ``heads_kv``), a causal mask aligned to the bottom right (query ``i`` sees key ``j`` when
``j <= i + seq_k - seq_q``), and a query row that sees no key outputs zeros.
"""

import torch
import torch.nn.functional as F


def attention(q, k, v, causal, scale):
    seq_q, seq_k = q.shape[2], k.shape[2]
    mask = None
    if causal:
        i = torch.arange(seq_q, device=q.device)[:, None]
        j = torch.arange(seq_k, device=q.device)[None, :]
        mask = j <= i + (seq_k - seq_q)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=float(scale), enable_gqa=q.shape[1] != k.shape[1])
    if mask is not None:
        # SDPA gives NaN for a row that sees no key; the convention is zeros.
        o = o.masked_fill(~mask.any(-1)[:, None], 0)
    return o
