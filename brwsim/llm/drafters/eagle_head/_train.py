"""Training the head (seeded, cached in the user cache directory) and its held-out report."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ...._stats import mean_ci95
from ....errors import BrwsimError
from ...sources import cache_dir
from . import _data
from ._config import FORMAT, HeadConfig
from ._model import Head, head_for
from ._target import decode, features, fingerprint
from ._unroll import heldout_stats, loss

EVAL_DEPTHS = 3


def state_sha256(head: Head) -> str:
    """sha256 over the state dict (names and float32 bytes, in name order)."""
    h = hashlib.sha256()
    for name, t in sorted(head.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().float().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


@torch.no_grad()
def target_tables(model, ids: np.ndarray, topk: int, desc: str, progress: bool) -> tuple:
    """(features ``[N, T, H]``, the target's top-``topk`` next tokens ``[N, T, topk]``), 4 windows a pass."""
    fs, tops = [], []
    dev = next(model.parameters()).device
    for a in tqdm(range(0, len(ids), 4), desc=desc, unit="pass", disable=not progress):
        f = features(model, torch.as_tensor(ids[a : a + 4], device=dev))
        fs.append(f)
        tops.append(torch.topk(decode(model, f), topk, dim=-1).indices)
    return torch.cat(fs), torch.cat(tops)


def tables(model, ids, hid, topk: int, path: Path, progress: bool) -> tuple:
    """(train features, their top-k next tokens, held-out features, whether they came from ``path``).

    The target's tables depend on the data, the target and ``topk`` only, so
    they are kept in the cache beside the heads and shared by every config
    that reads the same windows.
    """
    dev = next(model.parameters()).device
    if path.is_file():
        try:
            t = torch.load(path, weights_only=True, map_location=dev)
            return t["f"], t["tops"], t["hf"], True
        except (OSError, RuntimeError, KeyError):
            pass  # recomputed below
    f, tops = target_tables(model, ids, topk, "eagle head: target features", progress)
    hf, _ = target_tables(model, hid, 1, "eagle head: held-out features", progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    torch.save({"f": f.cpu(), "tops": tops.cpu(), "hf": hf.cpu()}, tmp)
    os.replace(tmp, path)
    return f, tops, hf, False


def _schedule(cfg: HeadConfig, step: int) -> float:
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(cfg.steps - cfg.warmup, 1)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))


def fit(head: Head, model, f, ids, tops, cfg: HeadConfig, progress: bool = True) -> list:
    """``cfg.steps`` AdamW steps on random batches (seeded); returns the loss of every step."""
    dev = f.device  # the target's: features, tokens, head and noise all there
    torch.manual_seed(cfg.seed)
    gen = torch.Generator(device=dev).manual_seed(cfg.seed + 1)
    rng = np.random.default_rng([cfg.seed, 2])
    opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _schedule(cfg, s))
    toks = torch.as_tensor(ids, device=dev)
    history = []
    bar = tqdm(range(cfg.steps), desc="eagle head: training", unit="step", disable=not progress)
    for _ in bar:
        b = torch.as_tensor(rng.choice(len(ids), size=min(cfg.batch, len(ids)), replace=False), device=dev)
        total, _ = loss(head, model, f[b], toks[b], tops[b], cfg, gen)
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        sched.step()
        history.append(float(total.detach()))
        bar.set_postfix(loss=f"{history[-1]:.4f}")
    return history


def evaluate(head: Head, model, f, ids, depths: int = EVAL_DEPTHS) -> list[dict]:
    """Held-out KL(p || q) and top-1 agreement at drafting depths 1..``depths`` (95% CI over windows)."""
    head.eval()
    toks = torch.as_tensor(ids, device=f.device)
    rows = torch.cat(
        [heldout_stats(head, model, f[a : a + 2], toks[a : a + 2], depths) for a in range(0, len(ids), 2)], 1
    )
    out = []
    for d in range(depths):
        kl, kl_ci = mean_ci95(rows[d, :, 0].tolist())
        top, top_ci = mean_ci95(rows[d, :, 1].tolist())
        out.append({"depth": d + 1, "kl": kl, "kl_ci95": kl_ci, "top1_agree": top, "top1_agree_ci95": top_ci})
    return out


def head_dir(target, key: str) -> Path:
    return cache_dir() / "eagle-head" / f"{str(target.name).replace(os.sep, '_')}-{key}"


def save(head: Head, meta: dict, dest: Path) -> None:
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save(head.state_dict(), tmp / "head.pt")
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    if dest.exists():
        shutil.rmtree(tmp, ignore_errors=True)
        return
    os.replace(tmp, dest)


def load(model, dest: Path) -> tuple[Head, dict] | None:
    """The cached head and its metadata, or None when absent (a corrupt entry is a one-line error)."""
    if not (dest / "head.pt").is_file() or not (dest / "meta.json").is_file():
        return None
    try:
        meta = json.loads((dest / "meta.json").read_text())
        state = torch.load(dest / "head.pt", weights_only=True, map_location="cpu")
        head = head_for(model, float(state["scale"]))
        head.load_state_dict(state)
    except Exception as e:  # noqa: BLE001 - a damaged cache file: torch.load raises struct, pickle, zip errors...
        raise BrwsimError(
            f"cached eagle head {dest} is unreadable ({type(e).__name__}); delete it to retrain"
        ) from None
    if meta.get("format") != FORMAT or state_sha256(head) != meta.get("sha256"):
        raise BrwsimError(f"cached eagle head {dest} does not match its metadata; delete it to retrain")
    return head.eval(), meta


def locate(target, cfg: HeadConfig) -> dict:
    """The head's training and held-out windows, the files they came from, its data spec, cache key and directory
    (reads the text and tokenizes the windows; trains nothing)."""
    tok, c = target.tokenizer, cfg.corpus
    ids, files = _data.chunks(tok, cfg.train_chunks, cfg.seq_len, cfg.chunks_per_file, cfg.seed, False, c)
    hid, hfiles = _data.chunks(tok, cfg.heldout_chunks, cfg.seq_len, cfg.chunks_per_file, cfg.seed, True, c)
    data, fp = _data.data_spec(ids, hid, c), fingerprint(target)
    key = cfg.key({"data": data, "target": fp})
    return {"ids": ids, "files": files, "hid": hid, "hfiles": hfiles, "data": data, "fingerprint": fp,
            "key": key, "dest": head_dir(target, key)}  # fmt: skip


def train(target, cfg: HeadConfig, progress: bool = True, log=None) -> tuple[Head, dict]:
    """Train (or load from the cache) the head for ``target`` under ``cfg`` on the target's device (its tables
    cached on the host); returns (head, metadata)."""
    say = log or (lambda _msg: None)
    t0 = time.perf_counter()
    model = target.model
    where = locate(target, cfg)
    ids, files, hid, hfiles = where["ids"], where["files"], where["hid"], where["hfiles"]
    data, fp, key, dest = where["data"], where["fingerprint"], where["key"], where["dest"]
    cached = load(model, dest)
    if cached is not None:
        say(f"eagle head: loaded {dest} (sha256 {cached[1]['sha256'][:16]})")
        return cached
    say(f"eagle head: training {cfg.train_chunks} windows x {cfg.seq_len} tokens, {cfg.steps} steps -> {dest}")
    for p in model.parameters():
        p.requires_grad_(False)
    t1 = time.perf_counter()
    fkey = hashlib.sha256(json.dumps([data, fp, cfg.topk], sort_keys=True).encode()).hexdigest()[:16]
    f, tops, hf, cached_features = tables(model, ids, hid, cfg.topk, dest.parent / f"features-{fkey}.pt", progress)
    t2 = time.perf_counter()
    scale = float(f.pow(2).mean().sqrt())
    head = head_for(model, scale)
    head.reset(torch.Generator().manual_seed(cfg.seed))  # drawn on the host: the same start on every device
    head = head.to(f.device)
    history = fit(head, model, f, ids, tops, cfg, progress)
    t3 = time.perf_counter()
    meta = {
        "format": FORMAT,
        "key": key,
        "config": cfg.to_dict(),
        "feature": "last hidden state before the final norm (output of the last decoder layer)",
        "scale": scale,
        "data": data,
        "train_files": len(files),
        "heldout_files": len(hfiles),
        "loss": history,
        "heldout": evaluate(head, model, hf, hid),
        "train_windows": evaluate(head, model, f[: len(hid)], ids[: len(hid)]),
        "features_cached": cached_features,
        "seconds": {"data": t1 - t0, "features": t2 - t1, "training": t3 - t2, "eval": time.perf_counter() - t3},
        "sha256": state_sha256(head),
    }
    save(head, meta, dest)
    say(f"eagle head: trained in {t3 - t0:.0f} s, sha256 {meta['sha256'][:16]}, saved {dest}")
    return head.eval(), meta
