"""The head's training configuration: a frozen dataclass, validated, hashed into the cache key (numpy only)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from ....errors import BrwsimError

FORMAT = "brwsim-eagle-head-v1"
DATA_VERSION = 2  # the ShareGPT chunk rule (brwsim.llm.sources._sharegpt); 1 split by chunk, now unreproducible


@dataclasses.dataclass(frozen=True)
class HeadConfig:
    """Budget and hyper-parameters of one trained head.

    Data: ``train_chunks`` (``heldout_chunks``) windows of ``seq_len`` tokens from the
    ``corpus``: ``"stdlib"``, the Python standard library's ``.py`` files (docs/drafters.md,
    "A trained draft head"), or ``"sharegpt"``, ShareGPT conversations of the training
    split (no chunk of a conversation the chat prompts come from); at most
    ``chunks_per_file`` from one file or chunk. Training: ``steps`` AdamW steps
    of ``batch`` windows, learning rate ``lr`` (linear warm-up over
    ``warmup`` steps, cosine decay), loss = ``w_feat`` * smooth-L1(feature) +
    ``w_kl`` * cross-entropy against the target's next-token distribution,
    summed over ``unroll`` drafting depths (depth 2 and beyond read the head's
    own predicted features, as at drafting time), ``noise`` = relative std of
    the Gaussian noise added to the target's features during training. ``data_version``:
    the rule that picks the ShareGPT chunks (2: no chunk of a conversation with an
    evaluation chunk, none repeating an evaluation prompt); a chat head's config, and so
    every result cached under it, changes with the rule.
    """

    seq_len: int = 128
    train_chunks: int = 1200
    heldout_chunks: int = 16
    chunks_per_file: int = 4
    steps: int = 600
    batch: int = 8
    lr: float = 1.5e-3
    warmup: int = 10
    unroll: int = 3
    w_feat: float = 1.0
    w_kl: float = 0.5
    topk: int = 16
    noise: float = 0.05
    seed: int = 0
    corpus: str = "stdlib"
    data_version: int = DATA_VERSION

    def __post_init__(self):
        ints = ("seq_len", "train_chunks", "heldout_chunks", "chunks_per_file", "steps", "batch", "unroll", "topk")
        for name in ints:
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise BrwsimError(f"eagle head config: {name} must be a positive integer, got {v!r}")
        if self.seq_len < 2 * self.unroll + 2:
            raise BrwsimError(f"eagle head config: seq_len must be >= 2 * unroll + 2, got {self.seq_len}")
        for name in ("lr", "w_feat", "w_kl", "noise"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v >= 0 or v != v or v == float("inf"):
                raise BrwsimError(f"eagle head config: {name} must be a finite number >= 0, got {v!r}")
        if not self.lr > 0 or not self.w_feat + self.w_kl > 0:
            raise BrwsimError("eagle head config: lr and w_feat + w_kl must be > 0")
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise BrwsimError(f"eagle head config: warmup must be an integer >= 0, got {self.warmup!r}")
        if self.corpus not in ("stdlib", "sharegpt"):
            raise BrwsimError(f"eagle head config: corpus must be 'stdlib' or 'sharegpt', got {self.corpus!r}")
        if self.data_version != DATA_VERSION:
            raise BrwsimError(f"eagle head config: data_version must be {DATA_VERSION}, got {self.data_version!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise BrwsimError(f"eagle head config: seed must be an integer, got {self.seed!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def key(self, extra: dict) -> str:
        """Cache key: a hash of the config, the seed and the data/target description ``extra``."""
        config = self.to_dict()
        if config["corpus"] == "stdlib":  # the first corpus: heads trained before the option keep their keys
            del config["corpus"], config["data_version"]  # (the rule picks ShareGPT chunks only)
        blob = json.dumps({"format": FORMAT, "config": config, **extra}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


QUICK = HeadConfig(
    seq_len=32, train_chunks=6, heldout_chunks=2, chunks_per_file=2, steps=12, batch=2, warmup=2, lr=3e-3, unroll=2
)
FULL = HeadConfig()


def config_from(quick: bool, **overrides) -> HeadConfig:
    """The quick or full budget, with named fields replaced (unknown names are a one-line error)."""
    base = QUICK if quick else FULL
    names = {f.name for f in dataclasses.fields(HeadConfig)}
    bad = sorted(set(overrides) - names)
    if bad:
        raise BrwsimError(f"eagle head config: unknown field {bad[0]!r}; known: {', '.join(sorted(names))}")
    return dataclasses.replace(base, **overrides)
