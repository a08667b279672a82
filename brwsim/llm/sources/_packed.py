"""A transformer run on packed tokens: many prompts' tree questions in one forward pass (Llama, Gemma 3).

:class:`PackedLM` answers two kinds of request (:class:`Open`, :class:`Extend`)
for any number of contexts at once. The tokens of every request are packed
into one sequence of ``T`` rows; embeddings, norms, projections, the MLP and
the LM head run on all rows together (the weights are read once per pass),
and only attention is per request, over that request's own keys and values:

- an :class:`Open` request is a prompt: causal attention over its tokens,
  whose keys and values fill the first slots of the context's cache
  (:class:`TreeKV`);
- an :class:`Extend` request is a batch of new tree nodes of one context:
  node ``i`` is a token at position ``len(prompt) + depth - 1`` that sees the
  whole prompt, the slots of its own ancestors and itself. Its keys and
  values take the next free slots of the context's cache.

A request's attention gathers only the slots its queries can see, so a pass
costs what its tokens cost, not what the contexts hold; requests of the same
padded shape attend in one batched product (:class:`Batch`).

Packing changes no bit. The matrix products run on ``T`` padded up to a
multiple of :data:`ROW_MULTIPLE` rows (zero rows, dropped after): on the
CPU kernels measured here the product of a row then does not depend on how
many rows are beside it, while row counts 1-3, 5-7 and 9-11 take other
kernels whose last bits differ. Attention is computed at each request's own
padded shape, whether it is alone or batched with others, and everything else
is per row. tests/llm/sources/test_packed.py requires a request's rows to be
bit-identical alone and packed with others: a prompt's numbers are the same
whatever was measured beside it.

The modules are the model's own (``input_layernorm``, ``q_proj``, ...,
``mlp``, ``norm``, ``lm_head``, ``rotary_emb``; Gemma 3's query and key norms
and the norms around its attention and MLP outputs, its rotary table per layer
type), so a layer subset (layer skipping, early exit) or a rounded copy of the
weights (low-bit drafters) runs through the same code. Other architectures
use the generic transformers path (:mod:`._hf`).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

ROW_MULTIPLE = 4  # matrix products on a multiple of this many rows (see the module docstring)
RATES: dict[str, float] = {}  # this machine's "bandwidth" (bytes/s) and "flops" (FLOP/s), once set_rates is called


def set_rates(bandwidth: float, flops: float) -> None:
    """This machine's memory bandwidth (bytes/s, a copy counting read + write) and float32 matmul rate (FLOP/s),
    e.g. :func:`brwsim.speedup._timing.machine_peaks`: from then on every pass also accounts its *floor*,
    max(bytes / bandwidth, FLOPs / rate), which :mod:`.rounds` attributes to phases like model time."""
    RATES.update(bandwidth=float(bandwidth), flops=float(flops))


@dataclasses.dataclass(frozen=True)
class Work:
    """What one pass of an engine must move and compute besides its attention: the weights read once, the
    multiply-adds per token of its decoder layers, the LM head, and its key/value geometry."""

    weight_bytes: float
    matmul_params: float  # weight elements multiplied per token (decoder layers and input maps)
    lm_params: float  # LM head elements, multiplied per answer row
    vocab: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    elt: int  # bytes per element of the keys and values

    def floor(self, batch: Batch) -> float | None:
        """The roofline time of one pass of ``batch`` (None until :func:`set_rates`)."""
        if not RATES:
            return None
        T, rows = len(batch.tokens), batch.answer_rows
        kv = self.layers * 2 * self.kv_heads * self.head_dim * self.elt  # bytes of one token's keys and values
        flops = 2 * self.matmul_params * T + 2 * self.lm_params * rows
        flops += self.layers * 4 * self.heads * self.head_dim * batch.scores
        moved = self.weight_bytes + kv * (batch.keys_read + T) + 4 * self.vocab * rows
        return max(moved / RATES["bandwidth"], flops / RATES["flops"])


def work_of(modules, lm_head, layers: int, heads: int, kv_heads: int, head_dim: int, per_token) -> Work:
    """The :class:`Work` of an engine: ``modules`` hold every weight read per pass, ``per_token`` the linear maps
    every token goes through (the LM head apart)."""
    torch = _torch()
    params = {id(p): p for m in modules for p in m.parameters()}
    weight_bytes = sum(p.numel() * p.element_size() for p in params.values())
    mm = sum(m.weight.numel() for m in per_token if isinstance(m, torch.nn.Linear))
    w = lm_head.weight
    return Work(float(weight_bytes), float(mm), float(w.numel()), int(w.shape[0]), layers, heads, kv_heads, head_dim,
                int(w.element_size()))  # fmt: skip


def _torch():
    import torch

    return torch


ARCHITECTURES = ("llama", "gemma3_text")  # config.model_type of the models the engine runs


def _sync(device) -> None:
    """Wait for a CUDA device's queued work (a no-op elsewhere)."""
    if getattr(device, "type", str(device).split(":")[0]) == "cuda":
        _torch().cuda.synchronize(device)


def supported(model) -> bool:
    """Whether :class:`PackedLM` can run ``model``: a transformers Llama or Gemma 3 (text) causal LM with the
    modules it reads (layers with ``self_attn`` q/k/v/o projections, ``mlp``, their norms; ``model.norm``,
    ``rotary_emb``, an LM head) and no attention-logit soft-capping."""
    cfg = getattr(model, "config", None)
    inner = getattr(model, "model", None)
    if getattr(cfg, "model_type", None) not in ARCHITECTURES or inner is None:
        return False
    if getattr(cfg, "attn_logit_softcapping", None) is not None:
        return False
    if any(getattr(inner, n, None) is None for n in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return False
    names = ("q_proj", "k_proj", "v_proj", "o_proj")
    for layer in inner.layers:
        attn = getattr(layer, "self_attn", None)
        if attn is None or any(getattr(attn, n, None) is None for n in names):
            return False
        if any(getattr(layer, n, None) is None for n in ("mlp", "input_layernorm", "post_attention_layernorm")):
            return False
    return model.get_output_embeddings() is not None


class TreeKV:
    """One context's keys and values ``[layers, kv heads, slots, d]``: the prompt's in slots ``0 .. L - 1``, the
    tree nodes' after them (``used`` nodes so far); grown by half its size when full."""

    def __init__(self, n_layers: int, kv_heads: int, head_dim: int, dtype, device, prompt_len: int):
        torch = _torch()
        shape = (n_layers, kv_heads, prompt_len + 64, head_dim)
        self.k = torch.empty(shape, dtype=dtype, device=device)
        self.v = torch.empty(shape, dtype=dtype, device=device)
        self.used = 0
        self.prompt_len = prompt_len

    def reserve(self, n: int) -> None:
        """Room for ``n`` more node slots."""
        torch = _torch()
        have, need = self.k.shape[2], self.prompt_len + self.used + n
        if need <= have:
            return
        shape = (*self.k.shape[:2], max(need, have + have // 2), self.k.shape[3])
        k, v = (torch.empty(shape, dtype=self.k.dtype, device=self.k.device) for _ in range(2))
        k[:, :, :have], v[:, :, :have] = self.k, self.v
        self.k, self.v = k, v


@dataclasses.dataclass
class Open:
    """A prompt: its token ids. The answer: (its :class:`TreeKV`, the last position's log-probs ``f32[V]``, and,
    with ``hidden``, the last decoder layer's output at every position but the last ``[L - 1, H]``)."""

    ids: list
    hidden: bool = False
    on_device: bool = False  # the log-probs as a tensor on the model's device (a context reduces them there)


@dataclasses.dataclass
class Extend:
    """New tree nodes of one context, parents before children: ``tokens[i]`` at ``positions[i]``, seeing the
    prompt, the node slots ``sees[i]`` (its ancestors') and itself. The answer: their log-probs ``f32[n, V]``;
    node ``i`` takes slot ``kv.used + i``."""

    kv: TreeKV
    tokens: list
    positions: list
    sees: list
    on_device: bool = False  # the log-probs as a tensor on the model's device (a context reduces them there)


def _pad_rows(x, multiple: int = ROW_MULTIPLE):
    torch = _torch()
    n = x.shape[0]
    pad = -n % multiple
    return x if pad == 0 else torch.cat([x, x.new_zeros((pad, *x.shape[1:]))])


def _linear(module, x):
    """``module(x)`` for ``x [T, ...]`` on a multiple of :data:`ROW_MULTIPLE` rows (same bits for every ``T``)."""
    n = x.shape[0]
    return module(_pad_rows(x))[:n]


_INVARIANT: dict = {}


def rows_are_batch_invariant(widths=((576, 1536), (1536, 576), (576, 49152)), device="cpu") -> bool:
    """Whether this machine's kernels give a row the same bits whatever is computed beside it, as the engine
    relies on: a matrix product's row alone and among others (row counts multiples of :data:`ROW_MULTIPLE`, the
    ``(in, out)`` widths given) and a batched product's member alone and batched. True on the CPUs this project
    measured; where it is False, packed rows still agree with the rows alone to float rounding, and the tests
    check that instead."""
    key = (tuple(widths), str(device))
    if key not in _INVARIANT:
        torch = _torch()
        g = torch.Generator().manual_seed(0)
        ok = True
        for d_in, d_out in widths:
            w = torch.randn(d_out, d_in, generator=g).to(device)
            x = torch.randn(100, d_in, generator=g).to(device)
            ref = torch.nn.functional.linear(x[:4], w)
            for n in (8, 12, 16, 36, 100):
                ok &= bool(torch.equal(torch.nn.functional.linear(x[:n], w)[:4], ref))
        q, k = (torch.randn(3, 3, 12, 64, generator=g).to(device) for _ in range(2))
        ok &= bool(torch.equal(torch.matmul(q[:1], k[:1].transpose(2, 3)), torch.matmul(q, k.transpose(2, 3))[:1]))
        _INVARIANT[key] = ok
    return _INVARIANT[key]


KEY_BUCKET = 64  # a request's keys are padded to a multiple of this (its queries to one of ROW_MULTIPLE)


class Batch:
    """The packed requests of one pass: their tokens and positions, each request's span of rows, its
    :class:`TreeKV` (a new one for an :class:`Open` request) and the slots its queries see.

    Attention runs per *bucket*: the requests whose queries and keys, padded up to a multiple of
    :data:`ROW_MULTIPLE` and :data:`KEY_BUCKET`, have the same shape are one batched matrix product (their keys
    gathered from their own caches, padding masked out). A request alone is the same product at the same shape,
    so its rows are the same bits alone or packed (a batched product computes each member as it would alone).
    """

    def __init__(self, requests: list, n_layers: int, heads: int, kv_heads: int, head_dim: int, dtype, device):
        torch = _torch()
        self.requests, self.device, self.group = requests, device, heads // kv_heads
        toks, self.positions, self.spans, self.kvs, self.writes = [], [], [], [], []
        self.scores = self.keys_read = self.answer_rows = 0  # query-key pairs, keys read, LM head rows (the floor)
        buckets: dict[tuple[int, int], list] = {}
        for i, r in enumerate(requests):
            a = len(toks)
            if isinstance(r, Open):
                n = len(r.ids)
                toks += [int(t) for t in r.ids]
                self.positions += list(range(n))
                kv = TreeKV(n_layers, kv_heads, head_dim, dtype, device, n)
                first, seen = 0, np.arange(n)
                mask = np.tril(np.ones((n, n), dtype=bool))
                self.scores += n * (n + 1) // 2
                self.answer_rows += 1
            else:
                kv = r.kv
                kv.reserve(len(r.tokens))
                toks += [int(t) for t in r.tokens]
                self.positions += [int(p) for p in r.positions]
                first = kv.prompt_len + kv.used
                seen, mask = _extend_seen(r)
                self.scores += len(r.tokens) * len(seen)
                self.answer_rows += len(r.tokens)
            self.keys_read += len(seen)
            self.kvs.append(kv)
            self.writes.append(first)
            self.spans.append((a, len(toks)))
            Q, K = len(toks) - a, len(seen)
            key = (-(-Q // ROW_MULTIPLE) * ROW_MULTIPLE, -(-K // KEY_BUCKET) * KEY_BUCKET)
            buckets.setdefault(key, []).append((i, seen, mask))
        self.tokens = toks
        self.pos = torch.tensor(self.positions, dtype=torch.long, device=device)
        self.buckets = [self._bucket(Qb, Kb, members) for (Qb, Kb), members in buckets.items()]

    def _bucket(self, Qb: int, Kb: int, members: list) -> tuple:
        """(request indices, their padded key slots ``[R, Kb]``, additive masks ``[R, 1, g Qb, Kb]``, the packed
        rows each padded query reads ``[R * Qb]``, which of those are real, the rows they answer)."""
        torch = _torch()
        R = len(members)
        idx = np.zeros((R, Kb), dtype=np.int64)
        add = np.full((R, Qb, Kb), -np.inf, dtype=np.float32)
        rows, real, dest = np.zeros(R * Qb, dtype=np.int64), [], []
        for j, (i, seen, mask) in enumerate(members):
            a, b = self.spans[i]
            idx[j, : len(seen)] = seen
            add[j, : b - a, : len(seen)][mask] = 0.0
            add[j, b - a :, 0] = 0.0  # padding queries see one key (their rows are dropped)
            rows[j * Qb : j * Qb + Qb] = a
            rows[j * Qb : j * Qb + b - a] = np.arange(a, b)
            real += range(j * Qb, j * Qb + b - a)
            dest += range(a, b)
        add = np.broadcast_to(add[:, None, None], (R, 1, self.group, Qb, Kb)).reshape(R, 1, self.group * Qb, Kb)
        dev = self.device
        tensors = [torch.from_numpy(x).to(dev) for x in (idx, add.copy(), rows, np.array(real), np.array(dest))]
        return ([i for i, _, _ in members], *tensors)

    def attend(self, q, k, v, li: int, scale: float):
        """Store every request's keys/values ``k, v [G, T, d]`` of layer ``li``, then attend ``q [H, T, d]`` bucket
        by bucket; returns ``[T, H * d]``."""
        torch = _torch()
        H, T, d = q.shape
        G = k.shape[0]
        for (a, b), kv, first in zip(self.spans, self.kvs, self.writes, strict=True):
            kv.k[li, :, first : first + b - a] = k[:, a:b]
            kv.v[li, :, first : first + b - a] = v[:, a:b]
        out = torch.empty((T, H * d), dtype=q.dtype, device=q.device)
        for members, idx, add, rows, real, dest in self.buckets:
            R, Kb = idx.shape
            Qb = rows.shape[0] // R
            keys = torch.empty((R, G, Kb, d), dtype=q.dtype, device=q.device)
            vals = torch.empty_like(keys)
            for j, i in enumerate(members):
                torch.index_select(self.kvs[i].k[li], 1, idx[j], out=keys[j])
                torch.index_select(self.kvs[i].v[li], 1, idx[j], out=vals[j])
            qs = q[:, rows].view(H, R, Qb, d).transpose(0, 1).reshape(R, G, self.group * Qb, d)
            s = torch.matmul(qs, keys.transpose(2, 3)) * scale + add
            o = torch.matmul(torch.softmax(s.float(), dim=-1).to(q.dtype), vals)  # [R, G, g Qb, d]
            o = o.reshape(R, H, Qb, d).transpose(1, 2).reshape(R * Qb, H * d)
            out[dest] = o[real]
        return out

    def logp(self, decode, x, T=None) -> list:
        """Per request, ``log_softmax(decode(rows) / T)`` as ``f32[rows, V]`` on its answer rows (an Open
        request's last row, an Extend request's every row): NumPy on the host, or a tensor on the model's device
        for a request ``on_device``; ``T`` one temperature per request (None: 1)."""
        torch = _torch()
        keep, temps = [], []
        for i, (r, (a, b)) in enumerate(zip(self.requests, self.spans, strict=True)):
            rows = [b - 1] if isinstance(r, Open) else list(range(a, b))
            keep += rows
            temps += [1.0 if T is None else float(T[i])] * len(rows)
        idx = torch.tensor(keep, dtype=torch.long, device=self.device)
        logits = decode(x[idx]).float()
        if any(t != 1.0 for t in temps):
            logits = logits / torch.tensor(temps, device=logits.device)[:, None]
        logp = torch.log_softmax(logits, dim=-1)
        host = logp.cpu().numpy() if any(not r.on_device for r in self.requests) else None
        out, at = [], 0
        for r, (a, b) in zip(self.requests, self.spans, strict=True):
            n = 1 if isinstance(r, Open) else b - a
            out.append(logp[at : at + n] if r.on_device else host[at : at + n])
            at += n
        return out

    def commit(self) -> None:
        """The Extend requests' new slots are taken."""
        for r, (a, b) in zip(self.requests, self.spans, strict=True):
            if isinstance(r, Extend):
                r.kv.used += b - a


def _extend_seen(r: Extend):
    """An Extend request's (the cache slots its nodes see, in order: the prompt's, then nodes'; mask ``[Q, n]``)."""
    L, base = r.kv.prompt_len, r.kv.used
    own = [[L + s for s in ss] + [L + base + i] for i, ss in enumerate(r.sees)]
    nodes = sorted({s for ss in own for s in ss})
    col = {s: L + j for j, s in enumerate(nodes)}
    m = np.zeros((len(own), L + len(nodes)), dtype=bool)
    m[:, :L] = True
    for i, ss in enumerate(own):
        m[i, [col[s] for s in ss]] = True
    return np.concatenate([np.arange(L), np.array(nodes, dtype=np.int64)]), m


@dataclasses.dataclass
class LayerParts:
    """One pre-norm decoder layer as callables on rows ``[T, ...]``: the attention's norm and projections, the
    norm before the MLP and the MLP. Gemma 3 adds norms of the queries and keys per head (``q_norm``,
    ``k_norm``), of the attention's output (``attn_out_norm``) and of the MLP's (``mlp_out_norm``), and a
    rotary table per layer type (``rope``)."""

    in_norm: object
    q: object
    k: object
    v: object
    o: object
    post_norm: object
    mlp: object
    q_norm: object = None
    k_norm: object = None
    attn_out_norm: object = None
    mlp_out_norm: object = None
    rope: str | None = None


def llama_parts(layer) -> LayerParts:
    """A transformers Llama or Gemma 3 decoder layer's parts."""
    a = layer.self_attn
    if hasattr(layer, "pre_feedforward_layernorm"):  # Gemma 3: the norms around attention and MLP outputs
        return LayerParts(layer.input_layernorm, a.q_proj, a.k_proj, a.v_proj, a.o_proj,
                          layer.pre_feedforward_layernorm, layer.mlp, a.q_norm, a.k_norm,
                          layer.post_attention_layernorm, layer.post_feedforward_layernorm,
                          getattr(a, "layer_type", None))  # fmt: skip
    return LayerParts(layer.input_layernorm, a.q_proj, a.k_proj, a.v_proj, a.o_proj, layer.post_attention_layernorm,
                      layer.mlp)  # fmt: skip


def decoder_layer(x, cos, sin, parts: LayerParts, li: int, batch: Batch, heads: int, scale: float):
    """One pre-norm decoder layer on packed rows ``x [T, H]`` (rotary ``cos, sin [1, T, d]``; the keys and values
    of layer ``li`` stored and attended per request by ``batch``)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    T = x.shape[0]
    h = _linear(parts.in_norm, x)
    q = _linear(parts.q, h).view(T, heads, -1)
    d = q.shape[-1]
    k = _linear(parts.k, h).view(T, -1, d)
    v = _linear(parts.v, h).view(T, -1, d).transpose(0, 1)
    if parts.q_norm is not None:
        q, k = parts.q_norm(q), parts.k_norm(k)
    q, k = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    a = _linear(parts.o, batch.attend(q[0], k[0], v, li, scale))
    x = x + (a if parts.attn_out_norm is None else parts.attn_out_norm(a))
    m = _linear(parts.mlp, _linear(parts.post_norm, x))
    return x + (m if parts.mlp_out_norm is None else parts.mlp_out_norm(m))


def split_run(requests: list, tokens, max_tokens: int, one_pass) -> list:
    """``one_pass(group)`` on consecutive groups of at most ``max_tokens`` tokens (a larger request alone)."""
    out, group, size = [], [], 0
    for r in requests:
        n = tokens(r)
        if group and size + n > max_tokens:
            out += one_pass(group)
            group, size = [], 0
        group.append(r)
        size += n
    if group:
        out += one_pass(group)
    return out


class PackedLM:
    """A transformers Llama causal LM answering :class:`Open` and :class:`Extend` requests in packed passes
    (module docstring). ``max_tokens`` bounds the tokens of one pass (a larger list of requests is split)."""

    def __init__(self, model, max_tokens: int = 1024):
        inner = model.model
        cfg = getattr(model.config, "text_config", None) or model.config
        self.model = model
        self.embed, self.layers, self.norm = inner.embed_tokens, list(inner.layers), inner.norm
        self.rotary, self.lm_head = inner.rotary_emb, model.get_output_embeddings()
        self.parts = [llama_parts(layer) for layer in self.layers]
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads)
        self.scale = float(getattr(self.layers[0].self_attn, "scaling", self.head_dim**-0.5))
        windows = [getattr(layer.self_attn, "sliding_window", None) for layer in self.layers]
        self.window = min((w for w in windows if w), default=None)  # positions must stay below it (no mask)
        self.softcap = getattr(cfg, "final_logit_softcapping", None)
        self.dtype = next(model.parameters()).dtype
        self.device = next(model.parameters()).device
        self.max_tokens = int(max_tokens)
        self.passes = 0
        self.seconds = 0.0
        self.tokens_run = 0
        per_token = [m for p in self.parts for m in (p.q, p.k, p.v, p.o, *p.mlp.modules())]
        self.work = work_of([*self.layers, self.norm, self.lm_head], self.lm_head, len(self.layers), self.heads,
                            self.kv_heads, self.head_dim, per_token)  # fmt: skip
        self.last_floor: float | None = None  # the floor of the last run's passes (None: rates not set)

    def tokens(self, request) -> int:
        return len(request.ids) if isinstance(request, Open) else len(request.tokens)

    def _decode(self, rows):
        """The LM head's logits of final hidden states (soft-capped where the model caps them)."""
        torch = _torch()
        logits = _linear(self.lm_head, _linear(self.norm, rows))
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    def run(self, requests: list) -> list:
        """Answers in order (requests packed into passes of at most ``max_tokens`` tokens)."""
        self.last_floor = 0.0 if RATES else None
        return split_run(requests, self.tokens, self.max_tokens, self._pass)

    def _pass(self, requests: list) -> list:
        torch = _torch()
        _sync(self.device)  # CUDA runs asynchronously: start and stop the clock on an idle device
        t0 = time.perf_counter()
        batch = Batch(requests, len(self.layers), self.heads, self.kv_heads, self.head_dim, self.dtype, self.device)
        if self.window is not None and batch.positions and max(batch.positions) >= self.window:
            from ...errors import BrwsimError

            raise BrwsimError(
                f"a tree node at position {max(batch.positions)} is past this model's sliding attention window "
                f"({self.window} tokens), which the packed engine does not mask: lower --max-prompt-tokens or P"
            )
        with torch.inference_mode():
            x = self.embed(torch.tensor(batch.tokens, dtype=torch.long, device=self.device))
            ropes = {p.rope for p in self.parts}
            tables = {r: self.rotary(x[None], batch.pos[None], *([r] if r else [])) for r in ropes}
            for li, parts in enumerate(self.parts):
                cos, sin = tables[parts.rope]
                x = decoder_layer(x, cos, sin, parts, li, batch, self.heads, self.scale)
            logp = batch.logp(self._decode, x)
            answers = []
            for r, (a, b), kv, lp in zip(requests, batch.spans, batch.kvs, logp, strict=True):
                if isinstance(r, Open):
                    answers.append((kv, lp[0], x[a : b - 1].float().clone() if r.hidden else None))
                else:
                    answers.append(lp)
        batch.commit()
        _sync(self.device)
        self.passes += 1
        self.tokens_run += len(batch.tokens)
        self.seconds += time.perf_counter() - t0
        if self.last_floor is not None:
            self.last_floor += self.work.floor(batch)
        return answers
