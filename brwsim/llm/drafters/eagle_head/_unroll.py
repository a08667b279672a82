"""The head run over whole windows at several drafting depths at once (training and held-out evaluation).

Depth 1 at position i reads (target feature f_i, token x_{i+1}) and predicts
f_{i+1}, attending causally to depth-1 inputs only: every one of them is a
target feature, as a drafted tree's first level sees the verified prompt.
Depth s >= 2 at position i reads the head's own depth s - 1 prediction made
at position i - 1 and token x_{i+1}; it attends to the depth-1 keys at
positions <= i - s + 1 (the "prompt" of that chain) and to the keys of its own
chain (depth r at position i - s + r, r = 2..s), exactly what a depth-(s - 1)
node of a drafted tree sees at drafting time.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from ._target import decode, parts, rope


def depth_mask(s: int, T: int, device=None) -> torch.Tensor:
    """``[T, s * T]`` boolean: which keys (depth 1 .. s, each ``T`` positions) depth ``s`` at position i sees."""
    i = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    blocks = [j <= i - s + 1] if s > 1 else [j <= i]
    for r in range(2, s + 1):
        blocks.append(j == i - s + r)
    return torch.cat(blocks, dim=1)


def unroll(head, model, f, toks, depths: int, noise: float = 0.0, generator=None) -> list:
    """Predicted features ``[B, T - 1, H]`` at depths 1..``depths`` for windows ``f [B, T, H]``, ``toks [B, T]``.

    Row i of depth s predicts ``f[:, i + 1]``; it is meaningful for i >= s - 1.
    """
    B, T, H = f.shape
    emb = parts(model)[3](toks[:, 1:]).detach()
    dev = f.device  # every tensor where the features are: training runs on the target's device
    pos = torch.arange(T - 1, device=dev)[None].expand(B, -1)
    cos, sin = rope(model, pos)
    fin = f[:, :-1]
    if noise > 0:
        scale = head.scale * noise
        fin = fin + torch.randn(fin.shape, generator=generator, device=dev) * scale
    out, k, v = head.layer(head.embed_in(fin, emb), cos, sin, mask=depth_mask(1, T - 1, dev))
    outs, ks, vs = [out], [k], [v]
    for s in range(2, depths + 1):
        prev = torch.cat([torch.zeros_like(out[:, :1]), outs[-1][:, :-1]], dim=1)
        mask = depth_mask(s, T - 1, dev)
        out, k, v = head.layer(head.embed_in(prev, emb), cos, sin, torch.cat(ks, 2), torch.cat(vs, 2), mask)
        outs.append(out)
        ks.append(k)
        vs.append(v)
    return outs


def loss(head, model, f, toks, topk, cfg, generator=None) -> tuple[torch.Tensor, list]:
    """The training loss of a batch, and per depth (feature smooth-L1, cross-entropy on the candidate set).

    Candidate set: the union over the batch of the target's top-``cfg.topk`` next tokens
    at every position (and the text's own next tokens); on it both the target's
    and the head's distributions are renormalised, so the frozen LM head is
    applied to a few thousand rows instead of the whole vocabulary.
    """
    outs = unroll(head, model, f, toks, cfg.unroll, cfg.noise, generator)
    _, norm, lm, _, _ = parts(model)
    cand = torch.unique(torch.cat([topk[:, 1:].reshape(-1), toks[:, 2:].reshape(-1)]))
    W = lm.weight[cand].detach()
    tgt = f[:, 1:]
    with torch.no_grad():
        p = torch.softmax(norm(tgt) @ W.T, dim=-1)
    total = torch.zeros((), device=f.device)
    parts_ = []
    for s, out in enumerate(outs, start=1):
        sl = slice(s - 1, None)
        fl = F.smooth_l1_loss(out[:, sl] / head.scale, tgt[:, sl] / head.scale)
        ce = -(p[:, sl] * torch.log_softmax(norm(out[:, sl]) @ W.T, dim=-1)).sum(-1).mean()
        total = total + (cfg.w_feat * fl + cfg.w_kl * ce) / len(outs)
        parts_.append((float(fl.detach()), float(ce.detach())))
    return total, parts_


@torch.no_grad()
def heldout_stats(head, model, f, toks, depths: int) -> torch.Tensor:
    """``[depths, windows, 2]``: per window, mean KL(p || q) (full vocabulary, nats) and top-1 agreement."""
    outs = unroll(head, model, f, toks, depths)
    lp = torch.log_softmax(decode(model, f[:, 1:]), dim=-1)
    rows = []
    for s, out in enumerate(outs, start=1):
        lq = torch.log_softmax(decode(model, out), dim=-1)[:, s - 1 :]
        lps = lp[:, s - 1 :]
        kl = (lps.exp() * (lps - lq)).sum(-1).mean(-1)
        top = (lq.argmax(-1) == lps.argmax(-1)).float().mean(-1)
        rows.append(torch.stack([kl, top], dim=-1))
    return torch.stack(rows)
