"""Hostile input to the real-model command line: every argument, output path and model file is checked before any
slow work, with one line on stderr; a signal keeps the prompts that finished.

In-process tests check the arguments (the model load replaced by a function that fails the test, so an error that
came after it would show); subprocesses only where the behaviour belongs to the process (stderr's lines, signals).
Broken models are copies of a tiny random Llama with a word tokenizer in a temporary directory.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
from pathlib import Path

import pytest

from brwsim.errors import BrwsimError

needs_llm = pytest.mark.needs_llm
WORDS = ["<unk>", "def", "return", "x", "(", ")", ":", "y", "z"]
PROMPTS = ["def x ( y ) :", "return x", "x ( z )", "def y", "z : x", "return ( y )"]


def word_tokenizer(words):
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=words[0])


def _copy(good: Path, dest: Path) -> Path:
    dest.mkdir()
    for f in good.iterdir():
        (dest / f.name).write_bytes(f.read_bytes())
    return dest


def _edit_config(d: Path, **kw) -> None:
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(cfg | kw))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A good tiny model directory and broken copies of it, by name."""
    from tiny_llm import tiny_llama

    root = tmp_path_factory.mktemp("models")
    good = root / "good"
    tiny_llama(len(WORDS), n_layers=1, seed=3).save_pretrained(good)
    word_tokenizer(WORDS).save_pretrained(good)
    st = "model.safetensors"
    blob = (good / st).read_bytes()
    out = {"good": good}
    for name, edit in [
        ("truncated", lambda d: (d / st).write_bytes(blob[: len(blob) // 2])),
        ("garbage", lambda d: (d / st).write_bytes(bytes(range(256)) * 20)),
        ("empty", lambda d: (d / st).write_bytes(b"")),
        ("one_byte", lambda d: (d / st).write_bytes(b"\x07")),
        ("huge_header", lambda d: (d / st).write_bytes(struct.pack("<Q", 10**12) + b"{}")),
        ("extra_tail", lambda d: (d / st).write_bytes(blob + b"\0" * 64)),
        ("vocab1000", lambda d: _edit_config(d, vocab_size=1000)),
        ("hidden32", lambda d: _edit_config(d, hidden_size=32)),
        ("bert", lambda d: _edit_config(d, model_type="bert")),
        ("no_type", lambda d: (d / "config.json").write_text('{"vocab_size": 9}')),
        ("config_garbage", lambda d: (d / "config.json").write_bytes(b"\xff\x00{not json")),
        ("no_weights", lambda d: (d / st).unlink()),
        ("big_tokenizer", lambda d: word_tokenizer(WORDS + ["w", "v", "u"]).save_pretrained(d)),
    ]:
        edit(_copy(good, root / name))
        out[name] = root / name
    shard = _copy(good, root / "index_missing_shard")
    (shard / st).unlink()
    (shard / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-00001.safetensors"}}))
    out["index_missing_shard"] = shard
    return out


@pytest.fixture()
def no_load(monkeypatch):
    """``brwsim llm``'s model load replaced by a failure: an argument error must come before it."""
    import brwsim.llm.run as run

    def fail(*a, **k):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(run, "load_source", fail)


def _prompt_file(tmp_path: Path, rows: list[dict], name: str = "p.jsonl") -> str:
    f = tmp_path / name
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(f)


def _llm(model, prompts, *extra, n=4):
    return ["llm", "--model", str(model), "--prompts", prompts, "--n", str(n), "--P", "1,2", "--walks", "8",
            "--depth", "4", "--trees", "50", "--check-samples", "0", "--json", *extra]  # fmt: skip


def _one_line_error(capsys, argv, match: str) -> str:
    from brwsim.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("brwsim: error: ") and match in err, err
    return err


# --- arguments: every one checked before the model loads --------------------------------------------------------


@needs_llm
@pytest.mark.parametrize(
    "extra, match",
    [
        (["--max-prompt-tokens", "0"], "--max-prompt-tokens must be an integer >= 1"),
        (["--max-prompt-tokens", "-3"], "--max-prompt-tokens must be an integer >= 1"),
        (["--max-prompt-tokens", "-100000"], "--max-prompt-tokens must be an integer >= 1"),
        (["--threads", "100000"], "more than the"),
        (["--threads", "1000"], "more than the"),
        (["--dtype", "float8"], "--dtype must be float32 or bfloat16"),
        (["--record", "/"], "is a directory"),
        (["--save-pool", "/etc/hostname"], "is a file, not a directory"),
    ],
)
def test_bad_option_is_one_line_before_the_load(models, tmp_path, capsys, no_load, extra, match):
    prompts = _prompt_file(tmp_path, [{"prompt": t} for t in PROMPTS])
    _one_line_error(capsys, _llm(models["good"], prompts, *extra), match)


@needs_llm
@pytest.mark.parametrize(
    "spec, match",
    [(",,", "names no prompt"), (" , ", "names no prompt"), (",", "names no prompt"), (",,,,", "names no prompt")],
)
def test_prompt_sources_naming_nothing_are_refused(models, capsys, no_load, spec, match):
    _one_line_error(capsys, _llm(models["good"], spec), match)


@needs_llm
@pytest.mark.parametrize("field", ["prompt", "id", "task"])
def test_lone_surrogate_in_a_prompt_file(models, tmp_path, capsys, no_load, field):
    row = {"prompt": "def x", "id": "a", "task": "t"} | {field: "ab\ud800cd"}
    f = tmp_path / "sur.jsonl"
    f.write_text((json.dumps(row) + "\n") * 4)  # json.dumps escapes it: \ud800, as a hostile file would
    err = _one_line_error(capsys, _llm(models["good"], str(f)), "not valid Unicode")
    assert f"its {'text' if field == 'prompt' else field} is not valid" in err


@needs_llm
def test_too_few_prompts_for_the_bounds_is_refused_up_front(models, tmp_path, capsys, no_load):
    f = _prompt_file(tmp_path, [{"prompt": "def x", "task": "big"}] * 4 + [{"prompt": "x", "task": "lone"}])
    _one_line_error(capsys, _llm(models["good"], f), "task 'lone' has 1 prompt(s) x --walks 8")


def test_max_prompt_tokens_and_threads_checks():
    from brwsim.llm.sources._device import check_max_prompt_tokens, check_threads

    for bad in (0, -3, -100000, True, 2.5, "8"):
        with pytest.raises(BrwsimError, match="--max-prompt-tokens must be"):
            check_max_prompt_tokens(bad)
    assert check_max_prompt_tokens(1) == 1 and check_max_prompt_tokens(10**9) == 10**9
    with pytest.raises(BrwsimError, match=f"more than the {os.cpu_count()} CPU cores"):
        check_threads(os.cpu_count() + 1)
    assert check_threads(os.cpu_count()) == os.cpu_count() and check_threads(None) is None


@needs_llm
def test_hf_source_refuses_a_bad_max_prompt_tokens():
    from tiny_llm import tiny_llama

    from brwsim.llm.sources._hf import HFSource

    for bad in (0, -3):
        with pytest.raises(BrwsimError, match="--max-prompt-tokens must be"):
            HFSource(tiny_llama(11, n_layers=1), None, threads=1, device="cpu", max_prompt_tokens=bad)


# --- output paths: writable before the measurement ----------------------------------------------------------------


@needs_llm
@pytest.mark.parametrize(
    "which, path, match",
    [
        ("--record", "{tmp}", "is a directory: give a file name"),
        ("--record", "{tmp}/missing/rows.npz", "does not exist; create it"),
        ("--record", "{tmp}/afile/rows.npz", "is a file; create it"),
        ("--record", "/proc/rows.npz", "cannot write in /proc"),
        ("--save-pool", "{tmp}/afile", "is a file, not a directory"),
        ("--save-pool", "{tmp}/afile/pools", "is a file, so the directory cannot be made"),
        ("--save-pool", "/proc/pools", "cannot write in /proc"),
    ],
)
def test_unwritable_outputs_fail_before_the_load(models, tmp_path, capsys, no_load, which, path, match):
    (tmp_path / "afile").write_text("x")
    prompts = _prompt_file(tmp_path, [{"prompt": t} for t in PROMPTS])
    _one_line_error(capsys, _llm(models["good"], prompts, which, path.format(tmp=tmp_path)), match)


def test_writable_checks_create_nothing(tmp_path):
    from brwsim._cache import check_writable_dir, check_writable_file

    assert check_writable_dir(tmp_path / "a" / "b", "X") == tmp_path / "a" / "b"
    assert check_writable_file(tmp_path / "rows.npz", "X") == tmp_path / "rows.npz"
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(BrwsimError, match="needs a file name"):
        check_writable_file("", "--record")


@pytest.mark.parametrize("value, match", [("{tmp}/afile", "is a file, not a directory"),
                                          ("{tmp}/afile/out", "is a file, so the directory"),
                                          ("/proc/out", "cannot write in /proc")])  # fmt: skip
def test_brwsim_out_must_be_a_writable_directory(tmp_path, monkeypatch, value, match):
    from experiments import common

    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("BRWSIM_OUT", value.format(tmp=tmp_path))
    with pytest.raises(BrwsimError, match=match):
        common.out_dirs()
    with pytest.raises(BrwsimError, match=match):  # a program's parse (brwsim reproduce): its own error
        common.parser("x").parse_args([])


def test_cache_in_the_way_of_the_xla_cache(tmp_path, monkeypatch):
    from brwsim._cache import enable_compilation_cache

    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("BRWSIM_CACHE", str(tmp_path / "afile"))
    monkeypatch.delenv("BRWSIM_XLA_CACHE", raising=False)
    with pytest.raises(BrwsimError, match="set BRWSIM_CACHE"):
        enable_compilation_cache()


# --- broken model copies -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, match",
    [
        ("truncated", "truncated"),
        ("garbage", "not a safetensors file"),
        ("empty", "is empty"),
        ("one_byte", "not a safetensors file"),
        ("huge_header", "not a safetensors file"),
        ("extra_tail", "corrupt"),
        ("no_type", "names no model_type"),
        ("config_garbage", "is not a JSON file"),
        ("no_weights", "has no weights"),
        ("index_missing_shard", "names model-00001.safetensors, which is not in"),
    ],
)
def test_broken_files_are_refused_without_torch(models, name, match):
    """Found from the small files alone (no weight read, no torch needed): the check ``plan`` can run too."""
    from brwsim.llm.sources import check_model, check_model_files

    with pytest.raises(BrwsimError, match=match) as e:
        check_model_files(models[name])
    assert "\n" not in str(e.value)
    with pytest.raises(BrwsimError, match=match):
        check_model(str(models[name]))


@needs_llm
@pytest.mark.parametrize(
    "name, match",
    [
        ("vocab1000", r"\[9, 16\] in the weights but \[1000, 16\] for config.json \(config.json's vocab_size is 1000"),
        ("hidden32", "the config does not match the weights"),
        ("bert", "model_type 'bert' needs"),
        ("big_tokenizer", "its tokenizer has 12 tokens but the model's vocabulary is 9"),
        ("truncated", "truncated"),
        ("garbage", "not a safetensors file"),
    ],
)
def test_broken_model_copies_are_one_line(models, name, match):
    from brwsim.llm.sources import load_source

    with pytest.raises(BrwsimError, match=match) as e:
        load_source(str(models[name]), threads=1, device="cpu")
    assert "\n" not in str(e.value)


@needs_llm
def test_good_copies_pass_the_checks(models, tmp_path):
    """The checks refuse nothing sound: the tiny Llama, and a tiny Gemma 3 whose LM head is tied to its embedding
    (one tensor in the file for two parameters)."""
    from tiny_llm import tiny_gemma3

    from brwsim.llm.sources import check_model_shapes, load_source

    src = load_source(str(models["good"]), threads=1, device="cpu")
    assert src.vocab_size == len(WORDS) and src.encode("def x")
    g = tmp_path / "gemma"
    tiny_gemma3(len(WORDS)).save_pretrained(g)
    word_tokenizer(WORDS).save_pretrained(g)
    check_model_shapes(g)
    assert load_source(str(g), threads=1, device="cpu").vocab_size == len(WORDS)


@needs_llm
def test_a_bad_gguf_file(tmp_path):
    from brwsim.llm.sources import check_model

    f = tmp_path / "m.gguf"
    f.write_bytes(b"")
    with pytest.raises(BrwsimError, match="not a GGUF file"):
        check_model(str(f))
    f.write_bytes(b"PK\x03\x04 not gguf")
    with pytest.raises(BrwsimError, match="no GGUF magic"):
        check_model(str(f))


# --- the process: one stderr line after a load, signals keep finished prompts ---------------------------------


def _cli(*argv) -> list[str]:
    return [sys.executable, "-m", "brwsim", *argv]


@needs_llm
def test_error_after_the_load_is_one_stderr_line(models, tmp_path, processes):
    """A prompt that gives no token is found after the model loads: stderr is that one line, no progress bar."""
    f = _prompt_file(tmp_path, [{"prompt": t} for t in PROMPTS[:3]] + [{"prompt": "   ", "id": "blank"}])
    code, out, err = processes.run(_cli(*_llm(models["good"], f)), timeout=300)
    assert code == 2 and out == ""
    assert err == "brwsim: error: prompt 'blank' of task 'p' gives no token on " + str(models["good"]) + "\n"


@needs_llm
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signal_keeps_the_finished_prompts(models, tmp_path, processes, sig):
    """After the first prompt finishes, a signal: the table of the finished prompts (marked interrupted), one
    stderr line naming the signal, exit 128 + signal."""
    f = _prompt_file(tmp_path, [{"prompt": PROMPTS[i % 6] + " x" * i, "id": str(i)} for i in range(60)])
    argv = _llm(models["good"], f, "--prompt-batch", "1", "--walks", "16", "--depth", "24", n=60)
    argv.remove("--json")
    p = processes.start(_cli(*argv), sigint_default=True)
    lines = []
    for line in p.stderr:
        lines.append(line)
        if line.startswith("[1/60]"):
            break
    assert lines and lines[-1].startswith("[1/60]"), lines
    os.kill(p.pid, sig)
    code, out, err = processes.finish(p, timeout=120)
    assert code == 128 + sig, (code, err)
    last = err.strip().splitlines()[-1]
    name = signal.Signals(sig).name
    assert last.startswith(f"brwsim: interrupted by {name} after ") and "of 60 prompts" in last, err
    assert all(ln.startswith("[") for ln in err.strip().splitlines()[:-1]), err  # progress lines, then the one line
    done = int(last.split(" after ")[1].split(" of ")[0])
    assert 1 <= done < 60
    assert f"(interrupted: {done} of 60 prompts finished)" in out and f"task p: {done} prompts" in out


def test_bench_refuses_no_repeat_before_loading(capsys):
    from brwsim.llm.bench import main

    for bad in ("0", "-2"):
        assert main(["--repeat", bad, "--model", "/nonexistent/model"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--repeat must be an integer >= 1" in err
    assert main(["--model", "/nonexistent/model"]) == 2  # the model is checked before any timing
    assert "does not exist" in capsys.readouterr().err


# a signal to one process of a two-process run: every process stops within this many seconds (measured: a few
# seconds, one model request and the exchange; sized for a loaded 2-core machine)
STOP_BOUND = 90


@needs_llm
@pytest.mark.parametrize(
    "case, target, sig",
    [
        ("SIGTERM to the launcher of process 1", 1, signal.SIGTERM),
        ("Ctrl-C to process 0, --record", 0, signal.SIGINT),
        ("SIGHUP to the launcher of process 0", 0, signal.SIGHUP),
    ],
)
def test_signal_to_one_process_keeps_every_finished_prompt(models, tmp_path, processes, case, target, sig):
    """Two processes: a signal to either after the first prompt finished stops both within STOP_BOUND s, each with
    the one line naming the signal and the process it was sent to; process 0 prints the table of every process's
    finished prompts (and writes --record's file of them); exit 128 + signal on both."""
    import time

    import numpy as np
    from test_processes import start_processes

    f = _prompt_file(tmp_path, [{"prompt": PROMPTS[i % 6] + " x" * i, "id": str(i)} for i in range(60)])
    argv = _llm(models["good"], f, "--prompt-batch", "1", "--walks", "16", "--depth", "24", n=60)
    argv.remove("--json")
    record = tmp_path / "rec.npz"
    if "--record" in case:
        argv += ["--record", str(record)]
    procs = start_processes(processes, 2, ["--heartbeat-timeout", "60", *argv])
    lines = []
    for line in procs[0].stderr:
        lines.append(line)
        if line.startswith("[1/60]"):
            break
    assert lines and lines[-1].startswith("[1/60]"), lines
    t0 = time.monotonic()
    if sig == signal.SIGINT:  # a terminal's Ctrl-C: the process group, launcher and worker
        os.killpg(procs[target].pid, sig)
    else:  # the launcher alone: it passes the signal on
        os.kill(procs[target].pid, sig)
    runs = [processes.finish(p, STOP_BOUND) for p in procs]
    assert time.monotonic() - t0 < STOP_BOUND
    name = signal.Signals(sig).name
    last = []
    for i, (code, _, err) in enumerate(runs):
        assert code == 128 + sig, (i, code, err[-3000:])
        tail = err.strip().splitlines()
        assert all(ln.startswith("[") for ln in tail[:-1]), err  # progress lines, then the one line
        last.append(tail[-1])
    first = "".join(lines[:-1]) + runs[0][2]
    assert last[0] == last[1], last
    assert last[0].startswith(f"brwsim: interrupted by {name} (sent to process {target}) after "), first
    done = int(last[0].split(" after ")[1].split(" of ")[0])
    assert 1 <= done < 60 and "of 60 prompts" in last[0]
    out = runs[0][1]
    assert f"(interrupted: {done} of 60 prompts finished)" in out and f"task p: {done} prompts" in out
    assert not runs[1][1].strip()  # only process 0 prints
    if "--record" in case:
        with np.load(record) as z:
            assert len(set(z["row_prompt"].tolist())) >= done  # every process's rows, written once
