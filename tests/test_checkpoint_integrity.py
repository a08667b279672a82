"""Checkpoints are keyed by what the run resolved to and checksummed: a changed law file or a damaged or edited
checkpoint is never resumed; a damaged one is refused in one line (exit status 2) that says how to start afresh."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

import brwsim
from brwsim._checkpoint import Checkpoint
from brwsim.cli import main
from brwsim.errors import BrwsimError

ARGS = dict(P=[1, 2], trees=40, seed=3, bounds=False, round_trees=16)


def _interrupted_after_one_round(monkeypatch, law: str, directory) -> brwsim.SimulationResult:
    """A run stopped (Ctrl-C) right after its first round of 16 trees was kept."""
    save = Checkpoint.save

    def save_then_stop(self, done, states):
        save(self, done, states)
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(Checkpoint, "save", save_then_stop)
        r = brwsim.simulate(law, **ARGS, checkpoint=directory)
    assert r.interrupted and r.trees == 16
    return r


def _markov(path, probs: str) -> None:
    law = {"states": {"a": f"fixed:probs={probs}"}, "initial": "a", "kernel": {"a": [[1.0]]}}
    path.write_text(json.dumps(law))


def _means(r) -> list[float]:
    return [x.stat.mean for x in r.results]


@pytest.mark.parametrize("kind", ["markov", "pool", "markov naming a pool"])
def test_a_law_file_changed_under_the_same_path_is_another_run(tmp_path, monkeypatch, kind):
    law_file, pool = tmp_path / "law.json", tmp_path / "pool.npz"
    if kind == "markov":
        spec, before, after = str(law_file), lambda: _markov(law_file, "0.8/0.2"), lambda: _markov(law_file, "0.3/0.7")
    else:
        spec = str(pool) if kind == "pool" else str(law_file)
        if kind != "pool":
            law_file.write_text(json.dumps({"states": {"a": str(pool)}, "initial": "a", "kernel": {"a": [[1.0]]}}))
        before = lambda: np.savez(pool, probs=np.array([[0.8, 0.2]]))  # noqa: E731
        after = lambda: np.savez(pool, probs=np.array([[0.3, 0.7]]))  # noqa: E731
    before()
    old = _interrupted_after_one_round(monkeypatch, spec, tmp_path / "ckpt")
    assert _means(old) == pytest.approx([0.8, 1.44], rel=1e-6)  # one child 0.8, then 0.8 * 0.8 more
    after()
    resumed = brwsim.simulate(spec, **ARGS, checkpoint=tmp_path / "ckpt")
    fresh = brwsim.simulate(spec, **ARGS)
    assert not resumed.interrupted and resumed.trees == 40
    assert _means(resumed) == _means(fresh) == pytest.approx([0.7, 1.19], rel=1e-6)  # nothing of the old law
    assert resumed.checkpoint != old.checkpoint and len(list((tmp_path / "ckpt").glob("simulate-*.npz"))) == 2


def _cli(directory) -> list[str]:
    return ["simulate", "--law", "fixed:probs=0.5/0.5", "--P", "1,2", "--trees", "40", "--seed", "3",
            "--round-trees", "16", "--json", "--checkpoint", str(directory)]  # fmt: skip


def _refused(argv, capsys, needle: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("brwsim: error: checkpoint ") and needle in lines[0], err
    assert "delete that file (or the directory" in lines[0] and "or pass another --checkpoint DIR" in lines[0]
    return lines[0]


def _member_data(path, name: str) -> tuple[int, int]:
    """(offset, size) in ``path`` of the stored bytes of the npz member ``name`` (its .npy file)."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(f"{name}.npy")
    raw = path.read_bytes()
    header = info.header_offset
    name_len = int.from_bytes(raw[header + 26 : header + 28], "little")
    extra_len = int.from_bytes(raw[header + 28 : header + 30], "little")
    return header + 30 + name_len + extra_len, info.compress_size


@pytest.fixture()
def finished(tmp_path, capsys):
    """A finished run's checkpoint file, and the command that resumes it."""
    argv = _cli(tmp_path)
    assert main(argv) == 0
    capsys.readouterr()
    (path,) = tmp_path.glob("simulate-*.npz")
    return argv, path


@pytest.mark.parametrize("damage", ["zero bytes", "truncated", "cut at the end", "a byte of done", "a byte of buf0"])
def test_a_damaged_checkpoint_is_refused_in_one_line(finished, capsys, damage):
    argv, path = finished
    raw = bytearray(path.read_bytes())
    if damage == "zero bytes":
        raw = b""
    elif damage == "truncated":
        raw = raw[: len(raw) // 2]
    elif damage == "cut at the end":
        raw = raw[:-1]
    else:
        offset, size = _member_data(path, damage.split()[-1])
        raw[offset + size - 1] ^= 0x01  # the last byte of the member's data
    path.write_bytes(bytes(raw))
    _refused(argv, capsys, "")
    assert path.read_bytes() == bytes(raw)  # left for the user to look at, never overwritten


def _rewrite(path, **changes) -> None:
    """The npz at ``path`` with some members replaced (the rest, the checksum included, as they were)."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays |= changes
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def test_an_edited_done_is_refused_not_believed(finished, capsys):
    argv, path = finished
    with np.load(path) as z:
        assert int(z["done"]) == 40
    _rewrite(path, done=np.array(5, np.int64))  # the running sums of 40 trees, said to be of 5
    _refused(argv, capsys, "is corrupt or was edited (its SHA-256 checksum does not match its contents)")
    _rewrite(path, done=np.array(40, np.int64))  # put back: the file is whole again and resumes
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["trees"] == 40


def test_statistics_that_do_not_match_done_are_refused(tmp_path):
    # a file whose checksum holds but whose statistics count other trees than it says (written by hand here)
    args = dict(P=[1], trees=8, seed=0, bounds=False, checkpoint=tmp_path)
    r = brwsim.simulate("fixed:probs=0.5/0.5", **args)
    (path,) = tmp_path.glob("simulate-*.npz")
    with np.load(path) as z:
        meta = json.loads(str(z["meta"]))
        states = [{"buf": z["buf0"][:3], "n": 0, "mean": 0.0, "m2": 0.0}, {"buf": z["buf1"], "n": 0, "mean": 0.0,
                  "m2": 0.0}]  # fmt: skip
    meta.pop("format")
    Checkpoint(tmp_path, meta).save(8, states)
    with pytest.raises(BrwsimError, match=r"holds statistics of \[3, 0\] trees, not of its 8 finished; nothing was"):
        brwsim.simulate("fixed:probs=0.5/0.5", **args)
    assert r.trees == 8


def test_the_key_names_the_content_and_the_code(tmp_path):
    r = brwsim.simulate("fixed:probs=0.5/0.5", P=[1], trees=2, bounds=False, checkpoint=tmp_path)
    with np.load(r.checkpoint) as z:
        meta = json.loads(str(z["meta"]))
        assert len(str(z["sha256"])) == 64
    assert meta["format"] == 2 and len(meta["code"]) == 16 and meta["x64"] is False
    law, oracle, no_draft_law = meta["content"]
    assert law != oracle and len({law, oracle, no_draft_law}) == 3
    other = brwsim.simulate("fixed:probs=0.6/0.4", P=[1], trees=2, bounds=False, checkpoint=tmp_path)
    with np.load(other.checkpoint) as z:
        assert json.loads(str(z["meta"]))["content"][0] != law
