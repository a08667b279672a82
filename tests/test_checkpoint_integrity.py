"""Checkpoints are keyed by what the run resolved to and checksummed: a changed law file or a damaged or edited
checkpoint is never resumed; a damaged one is refused in one line (exit status 2) that says how to start afresh."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
import zipfile
from pathlib import Path

import numpy as np
import pytest

import brwsim
from brwsim._checkpoint import Checkpoint, content_digest
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


# the checkpoint module's parts by hand (their mutants: docs/testing.md, "The checkpoint module")


@dataclasses.dataclass(frozen=True)
class _Resolved:
    x: int
    a: np.ndarray
    t: tuple
    d: dict
    path: str = ""
    s: str = "law"  # a string field not named path: no file read
    k: object = np.dtype("float32")  # a shape but no dtype: not an array


def test_content_digest_by_hand(tmp_path):
    f = tmp_path / "law.npz"
    f.write_bytes(b"the law's bytes")
    a = np.arange(2000, dtype=np.int32)  # longer than numpy's repr shows
    obj = _Resolved(x=1, a=a, t=(1, "b"), d={10: "a", 9: "b"}, path=str(f))
    name = f"<{_Resolved.__module__}.{_Resolved.__qualname__}>".encode()
    expected = hashlib.sha256(
        name + b"\0x=1" + b"\0a=" + f"<{a.dtype.str}{a.shape}>".encode() + a.tobytes() + b"\0t=[2" + b"1'b'"
        + b"\0d={2" + b"10'a'9'b'"  # keys in the order of their repr: '10' before '9'
        + b"\0path=" + repr(str(f)).encode() + b"\0file=" + hashlib.sha256(b"the law's bytes").digest()
        + b"\0s='law'\0k=dtype('float32')"
    ).hexdigest()[:16]  # fmt: skip
    assert content_digest(obj) == expected
    b = a.copy()
    b[1000] += 1  # in the part of the array its repr leaves out
    assert content_digest(dataclasses.replace(obj, a=b)) != expected
    f.write_bytes(b"other bytes")  # the same path, another file
    assert content_digest(obj) != expected
    assert content_digest({1: 0, "a": 1})  # keys that do not compare with each other
    gone = dataclasses.replace(obj, path=str(tmp_path / "gone"))
    assert content_digest(gone) == hashlib.sha256(
        name + b"\0x=1" + b"\0a=" + f"<{a.dtype.str}{a.shape}>".encode() + a.tobytes() + b"\0t=[2" + b"1'b'"
        + b"\0d={2" + b"10'a'9'b'" + b"\0path=" + repr(gone.path).encode() + b"\0file=<unreadable>"
        + b"\0s='law'\0k=dtype('float32')"
    ).hexdigest()[:16]  # fmt: skip


def test_the_code_version_follows_imports(tmp_path):
    import brwsim._checkpoint as ck

    assert ck._module_file("brwsim.tree") == ck.PACKAGE / "tree.py"
    assert ck._module_file("brwsim.laws") == ck.PACKAGE / "laws" / "__init__.py"
    assert ck._module_file("brwsim.nothing") is None
    text = (
        "import os\nimport brwsim.errors\nfrom . import _stats\nfrom .laws import Law, _dirichlet\n"
        "from ..tree import x\nfrom numpy import y\ndef f():\n    from ._keys import z\n"
    )
    (tmp_path / "mod.py").write_text(text)
    (tmp_path / "__init__.py").write_text(text)
    # a module of the package: `from . import m` names brwsim.m when that is a module; `..` leaves brwsim
    assert ck._imports("brwsim._sums", tmp_path / "mod.py") == {
        "brwsim.errors", "brwsim._stats", "brwsim.laws", "brwsim.laws._dirichlet", "brwsim._keys",
    }  # fmt: skip
    # a subpackage's module: `.` is the subpackage (no module brwsim.spine._stats: the package itself)
    assert ck._imports("brwsim.spine._walks", tmp_path / "mod.py") == {
        "brwsim.errors", "brwsim.spine", "brwsim.spine.laws", "brwsim.tree", "brwsim.spine._keys",
    }  # fmt: skip
    # a package's __init__ imports relative to the package itself
    assert ck._imports("brwsim.laws", tmp_path / "__init__.py") == {
        "brwsim.errors", "brwsim.laws", "brwsim.laws.laws", "brwsim.tree", "brwsim.laws._keys",
    }  # fmt: skip


def test_a_checkpoint_file_by_hand(tmp_path):
    meta = {"trees": 8, "b": [1, 2]}
    ckpt = Checkpoint(tmp_path / "new" / "dir", meta)
    text = json.dumps({"format": 2, "trees": 8, "b": [1, 2]}, sort_keys=True)
    assert ckpt.path == tmp_path / "new" / "dir" / f"simulate-{hashlib.sha256(text.encode()).hexdigest()[:16]}.npz"
    ckpt.check_writable()
    assert (tmp_path / "new" / "dir").is_dir()
    old = os.umask(0o022)
    try:
        ckpt.save(5, [{"buf": np.arange(3.0), "n": 5, "mean": 0.5, "m2": 1.5}])
        assert os.umask(0o022) == 0o022  # the umask is left as it was
    finally:
        os.umask(old)
    assert stat.S_IMODE(ckpt.path.stat().st_mode) == 0o644
    assert [p.name for p in (tmp_path / "new" / "dir").iterdir()] == [ckpt.path.name]
    with np.load(ckpt.path) as z:
        arrays = {k: z[k] for k in z.files}
    h = hashlib.sha256()
    for name in sorted(k for k in arrays if k != "sha256"):
        v = np.atleast_1d(arrays[name])  # (a 0-d member is hashed as shape (1,))
        h.update(f"\0{name}\0{v.dtype.str}\0{v.shape}\0".encode() + v.tobytes())
    assert str(arrays["sha256"]) == h.hexdigest()
    assert {k: v.dtype.str for k, v in arrays.items() if k not in ("meta", "sha256")} == {
        "buf0": "<f8", "done": "<i8", "count": "<i8", "n": "<i8", "mean": "<f8", "m2": "<f8",
    }  # fmt: skip
    assert json.loads(str(arrays["meta"])) == {"format": 2, "trees": 8, "b": [1, 2]}
    done, states = ckpt.load()
    assert done == 5 and states[0]["n"] == 5 and states[0]["mean"] == 0.5 and states[0]["m2"] == 1.5


def test_a_write_goes_through_a_temporary_file(tmp_path, monkeypatch):
    ckpt = Checkpoint(tmp_path, {"trees": 8})
    state = [{"buf": np.zeros(2), "n": 0, "mean": 0.0, "m2": 0.0}]
    renamed = []
    replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renamed.append((a, b)), replace(a, b)))
    ckpt.save(0, state)
    ((tmp, dest),) = renamed
    assert dest == ckpt.path and Path(tmp).parent == tmp_path
    assert Path(tmp).name.startswith(ckpt.path.stem + ".") and tmp.endswith(".tmp")

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", fail)
    with pytest.raises(OSError, match="No space left on device"):
        ckpt.save(1, state)
    assert [p.name for p in tmp_path.iterdir()] == [ckpt.path.name]  # the temporary file removed, the old file kept
    assert ckpt.load()[0] == 0


def test_a_checkpoint_directory_that_cannot_be_made_or_written(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    with pytest.raises(BrwsimError) as e:
        Checkpoint(tmp_path / "file" / "sub", {}).check_writable()
    assert str(e.value) == f"--checkpoint {tmp_path / 'file' / 'sub'}: cannot create the directory (Not a directory)"
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(BrwsimError) as e:
        Checkpoint(tmp_path, {}).check_writable()
    assert str(e.value) == f"--checkpoint {tmp_path}: the directory is not writable; choose another"


def test_a_refusal_ends_with_what_to_do(tmp_path):
    ckpt = Checkpoint(tmp_path, {"trees": 8})
    assert str(ckpt.refuse("why")) == (
        f"checkpoint {ckpt.path} why; nothing was resumed: delete that file (or the directory {tmp_path}) to start "
        "the run afresh, or pass another --checkpoint DIR"
    )


@pytest.mark.parametrize("member", ["no checksum", "an object array"])
def test_a_file_without_a_checksum_or_with_pickles_is_refused(tmp_path, member):
    ckpt = Checkpoint(tmp_path, {"trees": 8})
    ckpt.save(0, [{"buf": np.zeros(2), "n": 0, "mean": 0.0, "m2": 0.0}])
    with np.load(ckpt.path) as z:
        arrays = {k: z[k] for k in z.files}
    if member == "no checksum":
        del arrays["sha256"]
    else:
        arrays["buf0"] = np.array([{"a": 1}], dtype=object)
    with open(ckpt.path, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(BrwsimError) as e:
        ckpt.load()
    why = "is corrupt or was edited" if member == "no checksum" else "cannot be read (ValueError"
    assert f"checkpoint {ckpt.path} {why}" in str(e.value)


def test_each_refusal_says_why(tmp_path):
    from brwsim._checkpoint import _checksum

    state = [{"buf": np.zeros(2), "n": 0, "mean": 0.0, "m2": 0.0}]
    ckpt = Checkpoint(tmp_path, {"trees": 8})

    def refused(why: str) -> None:
        with pytest.raises(BrwsimError) as e:
            ckpt.load()
        assert str(e.value) == str(ckpt.refuse(why))

    ckpt.save(9, state)
    refused("says 9 trees are finished, not between 0 and 8")
    other = Checkpoint(tmp_path / "other", {"trees": 7})
    other.check_writable()
    other.save(0, state)
    (tmp_path / "other" / Checkpoint(tmp_path, {"trees": 7}).path.name).replace(ckpt.path)
    refused("belongs to another run")
    with np.load(ckpt.path) as z:
        arrays = {k: z[k] for k in z.files if k not in ("sha256", "done")}
    with open(ckpt.path, "wb") as f:
        np.savez(f, **arrays, sha256=np.array(_checksum(arrays)))
    refused("is not a checkpoint of this version of brwsim")
    ckpt.path.write_bytes(b"")
    refused("cannot be read (EOFError: it is truncated or corrupt)")  # an empty file
