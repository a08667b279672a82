"""Fuzz the command line in process: hostile SPEC strings, option values, law files, checkpoints and
environment variables through ``brwsim.cli.main``.

Every run must end in one of two ways within ``BRWSIM_FUZZ_LIMIT_S`` seconds (default 120): exit 0 with
output that keeps the invariants (strict JSON, every E[X] a finite number in [0, P], no rigorous upper bound
below E[X] minus four standard errors), or exit 2 with exactly one line on stderr (no traceback) and nothing
on stdout. Values are drawn from extreme floats (NaN, infinities, 1e-300, 1e300, subnormals), huge and
negative integers, empty strings and junk, but a *valid* value is always small (V, P, trees, walks), so a run
that is accepted stays short. The classes: law SPECs (simulate, laws), plan's numbers, Markov law files
(malformed kernel rows and initial tables, too many rows, rows that do not sum to one, NaN), damaged or edited
checkpoint files, hostile ``BRWSIM_OUT`` / ``BRWSIM_CACHE`` / ``BRWSIM_XLA_CACHE``, and extreme drafter
parameters on a small law. ``BRWSIM_FUZZ_EXAMPLES`` sets the number of examples per test (a handful by
default, for CI; e.g. ``BRWSIM_FUZZ_EXAMPLES=500`` for a long run, docs/testing.md).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import signal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brwsim.cli import main

EXAMPLES = int(os.environ.get("BRWSIM_FUZZ_EXAMPLES", "6"))
# one case's time limit: a cold compilation takes 25-35 s on one loaded core (eagle on a drawn law: measured 33 s)
LIMIT_S = float(os.environ.get("BRWSIM_FUZZ_LIMIT_S", "120"))
# the default run's examples are fixed (the suite's derandomized profile); a long run draws new ones each time
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                derandomize="BRWSIM_FUZZ_EXAMPLES" not in os.environ)  # fmt: skip

EXTREME = ["nan", "NaN", "inf", "-inf", "1e-300", "1e300", "5e-324", "1e-45", "3.4e38", "1e38", "0", "-0", "-1"]
JUNK = ["", " ", "abc", "1,2", "=", "0x10", "1e", "--", "1_0"]
# out of range for every count option (2^31 trees would be a valid, hours-long run)
BIG_INTS = ["-1", "0", str(2**32), str(2**63), str(10**30), "99999999999999999999999"]


def real(lo: float = 1e-3, hi: float = 50.0):
    """A number as the user types it: ordinary, extreme, or junk."""
    ordinary = st.floats(lo, hi, allow_nan=False).map(lambda x: f"{x:.6g}")
    any_float = st.floats(allow_nan=True, allow_infinity=True).map(repr)
    return st.one_of(ordinary, ordinary, st.sampled_from(EXTREME), any_float, st.sampled_from(JUNK))


def count(lo: int, hi: int):
    """An integer option: small and valid, or out of range, huge, or junk (never a huge valid one)."""
    return st.one_of(st.integers(lo, hi).map(str), st.integers(lo, hi).map(str), st.sampled_from(BIG_INTS + JUNK))


# peaked and subnormal distributions (a chain-like oracle tree; 5e-324 entries): valid, so they must run
PEAKED = ["0.9999/0.0001", "0.99999999/1e-8", "1/5e-324/5e-324", "1/1e-300", "0.5/0.5", "1", "1e-300/1"]


def probs():
    """``fixed:probs=``: a real distribution, a perturbed one, or extreme entries."""
    dist = st.lists(st.floats(0.01, 1.0), min_size=1, max_size=6).map(lambda w: [x / sum(w) for x in w])
    good = dist.map(lambda p: "/".join(f"{x:.17g}" for x in p))
    bad = st.lists(st.one_of(real(0, 1), st.sampled_from(EXTREME)), min_size=0, max_size=4).map("/".join)
    return st.one_of(good, good, bad, st.sampled_from(PEAKED))


def kv(**values) -> st.SearchStrategy[str]:
    """``key=value,...`` with each key sometimes dropped, and sometimes an unknown key added."""
    parts = [
        st.one_of(v.map(lambda x, k=k: f"{k}={x}"), v.map(lambda x, k=k: f"{k}={x}"), st.just(""))
        for k, v in values.items()
    ]
    extra = st.sampled_from(["", "", "", "beta=2", "V=3", "=", ",,"])
    return st.tuples(*parts, extra).map(lambda t: ",".join(x for x in t if x))


def spec(depth: int = 0):
    families = [
        kv(V=count(1, 64), alpha=real(1e-3, 5)).map("dirichlet:".__add__),
        kv(V=count(1, 64), sigma=real(0.01, 10)).map("logitnormal:".__add__),
        kv(V=count(1, 64), s=real(0.1, 3), s_sd=real(0, 2)).map("zipf:".__add__),
        probs().map("fixed:probs=".__add__),
        st.sampled_from(["", " ", "gaussian:V=3", "dirichlet", "dirichlet:", "noseparator", "x.npz", "y.json"]),
        st.text(max_size=12),
    ]
    if depth == 0:
        families.append(st.tuples(real(0.05, 5), spec(1)).map(lambda t: f"temp:T={t[0]},law={t[1]}"))
    return st.one_of(*families)


def P_list():
    ok = st.lists(st.integers(1, 6), min_size=1, max_size=3).map(lambda ps: ",".join(map(str, ps)))
    return st.one_of(ok, ok, ok, st.sampled_from(BIG_INTS + JUNK + ["1,,2", "1.5", "nan", "4,0"]))


def strict_loads(text: str):
    def refuse(c):
        raise AssertionError(f"not strict JSON: {c}")

    return json.loads(text, parse_constant=refuse)


def check_values(d) -> None:
    """Every E[X] (a row's mean at its P) is a finite number in [0, P]."""
    if isinstance(d, dict):
        if isinstance(d.get("P"), int) and d["P"] >= 1:
            for k in ("mean", "check_mean", "ex"):
                if k in d:
                    v = d[k]
                    assert isinstance(v, (int, float)) and math.isfinite(v), d
                    assert -1e-9 <= v <= d["P"] * (1 + 1e-9), d
        for v in d.values():
            check_values(v)
    elif isinstance(d, list):
        for v in d:
            check_values(v)


def check_bounds(d) -> None:
    """No rigorous upper bound printed below its row's E[X] minus four standard errors (and float32 rounding),
    where the run's E[X] is exact (a fixed law) or has 20 trees or more."""
    if not isinstance(d, dict) or not isinstance(d.get("results"), list):
        return
    kinds = d.get("kinds") or {}
    for r in d["results"]:
        mean, se = r.get("mean"), r.get("se")
        # an exact law (every tree the same value: E[X] itself), or enough trees for their se to mean something
        if se is None or not ((se == 0 and d.get("mu_se") == 0) or d.get("trees", 0) >= 20):
            continue
        for name, b in (r.get("bounds") or {}).items():
            kind = str(kinds.get(name, ""))
            if not kind.startswith("rigorous upper bound") or ("i.i.d." in kind and not d.get("iid")):
                continue
            if b is None or mean is None:
                continue
            floor = mean - 4 * se - 1e-6 * max(1.0, abs(mean))
            assert b >= floor, f"{name} bound {b!r} below E[X] {mean!r} - 4 se ({se!r}) at P = {r.get('P')}"


class Hang(BaseException):
    """A case ran past LIMIT_S (raised by the alarm in the main thread: no ``except Exception`` swallows it)."""


def _alarm(signum, frame):
    raise Hang


def run(argv: list[str], capsys, limit: float | None = None, cls: str | None = None) -> tuple[int, str, str]:
    """``brwsim ARGV`` in this process: (exit status, stdout, stderr); a case past ``limit`` seconds fails.
    ``BRWSIM_FUZZ_LOG``: one line per case (its class, ``cls`` or the command, and status) for a long run's
    tally."""
    limit = LIMIT_S if limit is None else limit
    capsys.readouterr()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        code = main(argv)
    except SystemExit as e:  # argparse: a bad option value or a missing argument
        code = e.code
    except Hang:
        code = "hang"
    except Exception as e:  # a traceback: logged for the long run's tally, then the test fails with it
        if os.environ.get("BRWSIM_FUZZ_LOG"):
            with open(os.environ["BRWSIM_FUZZ_LOG"], "a") as f:
                line = f"FAIL\t{cls or argv[0]}\ttraceback\t{' '.join(argv)!r}\t{type(e).__name__}: {e!r}"
                f.write(line[:2000] + "\n")
        raise
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    out, err = capsys.readouterr()
    if code == "hang":
        if os.environ.get("BRWSIM_FUZZ_LOG"):
            with open(os.environ["BRWSIM_FUZZ_LOG"], "a") as f:
                f.write(f"FAIL\t{cls or argv[0]}\thang\t{' '.join(argv)!r}\n")
        pytest.fail(f"brwsim {' '.join(argv)!r} did not end within {limit} s")
    if os.environ.get("BRWSIM_FUZZ_LOG"):  # a long run's tally: one line per case
        with open(os.environ["BRWSIM_FUZZ_LOG"], "a") as f:
            f.write(f"{cls or argv[0]}\t{code}\t{' '.join(argv[1:])!r}\n")
    return code, out, err


def check_outcome(argv, code, out, err, cmd: str) -> None:
    try:
        _check_outcome(argv, code, out, err, cmd)
    except AssertionError:
        if os.environ.get("BRWSIM_FUZZ_LOG"):
            with open(os.environ["BRWSIM_FUZZ_LOG"], "a") as f:
                f.write(f"FAIL\t{cmd}\t{code}\t{' '.join(argv)!r}\t{err.strip()[-300:]!r}\n")
        raise


def _check_outcome(argv, code, out, err, cmd: str) -> None:
    note = f"brwsim {' '.join(argv)!r}"
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, f"{note}: {err}"
        assert lines[0].startswith("brwsim"), f"{note}: {err}"
        assert out == "", f"{note}: printed {out[:200]!r} before its error"
        return
    assert code == 0, f"{note}: exit {code}: {err[-2000:]}"
    if "--json" in argv:
        d = strict_loads(out)
        check_values(d)
        check_bounds(d)


def drafter_options():
    """Nothing (the oracle) most often; else a drafter, perhaps with its draft law q."""
    drafter = st.sampled_from(
        ["topq", "chain", "eagle:top_k=2,depth=2", "sequoia", "nosuch", "", "eagle:top_k=0"]
        + ["eagle:depth=200", "eagle:top_k=1000000000", "sequoia:depth=1000000", "static:k=1000000000", "static:k=2"]
    )
    draft_law = st.one_of(
        st.just(None),
        real(0.01, 3).map("noise:sigma=".__add__),
        real(0.2, 5).map("temp:T=".__add__),
        st.tuples(real(0, 1), spec(1)).map(lambda t: f"mix:w={t[0]},law={t[1]}"),
        st.sampled_from(["1e-300", "5e-324", "1e40", "1e300"]).map("temp:T=".__add__),  # past float32's ends
        st.sampled_from(["1e30", "1e300"]).map("noise:sigma=".__add__),
        st.sampled_from(["0.999999999", "0.9999999999999999"]).map(lambda w: f"mix:w={w},law=zipf:V=3,s=1e300"),
    )
    pair = st.tuples(drafter, draft_law).map(
        lambda t: ["--drafter", t[0]] + ([] if t[1] is None else ["--draft-law", t[1]])
    )
    return st.one_of(st.just([]), st.just([]), pair)


@FUZZ
@given(
    law=spec(), P=P_list(), trees=count(1, 20), seed=count(0, 5), batch=st.one_of(st.none(), count(1, 8)),
    drafter=drafter_options(), as_json=st.booleans(),
)  # fmt: skip
def test_fuzz_simulate(law, P, trees, seed, batch, drafter, as_json, capsys):
    argv = ["simulate", "--law", law, "--P", P, "--trees", trees, "--seed", seed, *drafter]
    argv += ([] if batch is None else ["--batch", batch]) + (["--json"] if as_json else [])
    check_outcome(argv, *run(argv, capsys), "simulate")


@FUZZ
@given(law=spec(), P=P_list(), walks=count(2, 64), seed=count(0, 5), as_json=st.booleans())
def test_fuzz_laws(law, P, walks, seed, as_json, capsys):
    argv = ["laws", "--law", law, "--P", P, "--walks", walks, "--seed", seed] + (["--json"] if as_json else [])
    check_outcome(argv, *run(argv, capsys), "laws")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "ex.json"
    rows = [{"P": P, "mean": m, "ci95": 0.05} for P, m in ((1, 0.8), (2, 1.4), (4, 2.1))]
    path.write_text(json.dumps({"law": "x", "results": rows}))
    return path


@FUZZ
@given(
    bw=real(1e9, 1e13),
    flops=real(1e12, 1e16),
    overhead=st.one_of(st.just(None), real(0, 1e-2)),
    opt=st.sampled_from(["--bytes-per-param", "--overhead", "--params", "--context", "--draft-pass-seconds"]),
    value=st.one_of(real(1e-3, 1e10), st.sampled_from(BIG_INTS)),
    as_json=st.booleans(),
)
def test_fuzz_plan(saved, bw, flops, overhead, opt, value, as_json, capsys):
    hw = f"custom:bw={bw},flops={flops}" + ("" if overhead is None else f",overhead={overhead}")
    argv = ["plan", "--from-json", str(saved), "--hardware", hw, "--params", "1e9", f"{opt}={value}"]
    argv += ["--json"] if as_json else []
    code, out, err = run(argv, capsys)
    check_outcome(argv, code, out, err, "plan")
    if code == 0 and as_json:
        for t in strict_loads(out)["tables"]:
            assert all(math.isfinite(r["speedup"]) and r["speedup"] > 0 for r in t["rows"])


def test_fuzz_strategies_reach_both_outcomes(capsys):
    """The fuzz must exercise accepted runs, not only errors: one valid and one invalid draw of each kind."""
    ok = ["simulate", "--law", "zipf:V=8,s=1.5", "--P", "1,3", "--trees", "4", "--json"]
    code, out, err = run(ok, capsys)
    check_outcome(ok, code, out, err, "simulate")
    assert code == 0 and np.isclose(json.loads(out)["results"][0]["mean"], 1 / sum(i**-1.5 for i in range(1, 9)))
    bad = ["simulate", "--law", "zipf:V=8,s=nan", "--trees", "4"]
    code, out, err = run(bad, capsys)
    check_outcome(bad, code, out, err, "simulate")
    assert code == 2


# --- Markov law files --------------------------------------------------------------------------------------------

STATE_LAWS = [
    "fixed:probs=0.7/0.3",
    "fixed:probs=0.5/0.5",
    "fixed:probs=1",
    "dirichlet:V=3,alpha=0.5",
    "zipf:V=4,s=1.5",
]
# what a hostile file puts where a probability belongs (json.dumps writes NaN and Infinity as bare words)
JUNK_ENTRIES = ["abc", {}, None, [], [0.5], True, float("nan"), float("inf"), -1, 1e300, "0.5", 5e-324, 2]
_FILES = itertools.count()


def entry():
    return st.one_of(st.floats(0, 1), st.floats(0, 1), st.sampled_from(JUNK_ENTRIES))


def kernel_row(S: int):
    """A row over the S next states: a distribution, one that does not sum to one, wrong length, or junk."""
    good = st.lists(st.floats(0.01, 1), min_size=S, max_size=S).map(lambda w: [x / sum(w) for x in w])
    unnormalized = st.lists(st.floats(0, 3), min_size=S, max_size=S)
    any_length = st.lists(entry(), min_size=0, max_size=S + 2)
    return st.one_of(good, good, good, unnormalized, any_length, st.sampled_from(["abc", None, {}, 1]))


@st.composite
def markov_doc(draw):
    """A Markov law file's JSON object: half of them well formed (some with more kernel rows than V + 1, which
    are never read), the others with malformed parts drawn in."""
    S = draw(st.integers(1, 3))
    names = ["a", "b", "c"][:S]
    V = 4  # at least every state law's V below: more rows than V + 1 below
    good_row = st.lists(st.floats(0.01, 1), min_size=S, max_size=S).map(lambda w: [x / sum(w) for x in w])
    good_rows = st.one_of(st.lists(good_row, min_size=1, max_size=3), st.lists(good_row, min_size=V + 2,
                          max_size=V + 8))  # fmt: skip
    good_initial = st.one_of(
        st.sampled_from(names),
        st.lists(st.floats(0.01, 1), min_size=S, max_size=S).map(lambda w: dict(zip(names, w, strict=True))),
    )
    if draw(st.booleans()):
        return {
            "states": {n: draw(st.sampled_from(STATE_LAWS)) for n in names},
            "initial": draw(good_initial),
            "kernel": {n: draw(good_rows) for n in names},
        }
    states = {n: draw(st.one_of(st.sampled_from(STATE_LAWS), st.sampled_from(STATE_LAWS), spec(1))) for n in names}
    bad_rows = st.one_of(st.lists(kernel_row(S), min_size=1, max_size=3), st.lists(kernel_row(S), min_size=V + 2,
                         max_size=V + 8), st.sampled_from([[], None, "abc", {}, [[]]]))  # fmt: skip
    kernel = {n: draw(st.one_of(good_rows, bad_rows, bad_rows)) for n in names}
    initial = draw(
        st.one_of(
            good_initial,
            st.fixed_dictionaries({names[0]: entry()}),
            st.sampled_from([None, "abc", "zz", 3, [0.5, 0.5], {"zz": 1}, {}]),
        )
    )
    doc = {"states": states, "initial": initial, "kernel": kernel}
    drop = draw(st.sampled_from([None, None, None, "states", "initial", "kernel"]))
    if drop:
        del doc[drop]
    if draw(st.integers(0, 9)) == 0:
        doc["extra"] = 1
    return doc


def markov_text():
    raw = st.sampled_from(["", "null", "[]", "{", '{"states": {}}', "\x00\x01", '{"states": {"a": "fixed:probs=1"}'])
    return st.one_of(markov_doc().map(json.dumps), markov_doc().map(json.dumps), markov_doc().map(json.dumps), raw)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz_files")


@FUZZ
@given(
    text=markov_text(),
    P=P_list(),
    trees=count(1, 8),
    as_json=st.booleans(),
    command=st.sampled_from(["simulate", "laws"]),
)
def test_fuzz_markov_files(scratch, text, P, trees, as_json, command, capsys):
    path = scratch / f"markov{next(_FILES)}.json"
    path.write_text(text)
    if command == "simulate":
        argv = ["simulate", "--law", str(path), "--P", P, "--trees", trees]
    else:
        argv = ["laws", "--law", str(path), "--P", P, "--walks", "32"]
    argv += ["--json"] if as_json else []
    check_outcome(argv, *run(argv, capsys, cls="markov"), "markov")


# --- checkpoint files: damaged or edited, then resumed ----------------------------------------------------------

CKPT_RUN = ["simulate", "--law", "fixed:probs=0.5/0.3/0.2", "--P", "1,2", "--trees", "40", "--seed", "3",
            "--round-trees", "16", "--json"]  # fmt: skip


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A finished run's checkpoint (its file name and bytes) and that run's JSON."""
    from brwsim.cli import main as cli

    d = tmp_path_factory.mktemp("fuzz_ckpt")
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli([*CKPT_RUN, "--checkpoint", str(d)]) == 0
    (path,) = d.glob("simulate-*.npz")
    return path.name, path.read_bytes(), json.loads(out.getvalue())


def _edited(raw: bytes, member: str, value) -> bytes:
    """The npz ``raw`` with member ``member`` replaced by ``value`` (the rest, its checksum too, as it was)."""
    import io

    with np.load(io.BytesIO(raw)) as z:
        arrays = {k: z[k] for k in z.files}
    arrays[member] = np.asarray(value, dtype=arrays[member].dtype) if member in arrays else np.asarray(value)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


@st.composite
def damage(draw, raw: bytes):
    kind = draw(st.sampled_from(["truncated", "zero bytes", "flipped byte", "edited done", "edited member",
                                 "junk appended", "random bytes"]))  # fmt: skip
    n = len(raw)
    if kind == "truncated":
        return kind, raw[: draw(st.integers(0, n - 1))]
    if kind == "zero bytes":
        return kind, b""
    if kind == "flipped byte":
        i, mask = draw(st.integers(0, n - 1)), draw(st.integers(1, 255))
        return kind, raw[:i] + bytes([raw[i] ^ mask]) + raw[i + 1 :]
    if kind == "edited done":
        return kind, _edited(raw, "done", draw(st.sampled_from([0, 1, 5, 16, 39, 41, 2**31, -1, 10**15])))
    if kind == "edited member":
        member = draw(st.sampled_from(["buf0", "buf1", "meta", "sha256", "nosuch"]))
        return kind, _edited(raw, member, draw(st.sampled_from([0, -1, 1e300, float("nan")])))
    if kind == "junk appended":
        return kind, raw + draw(st.binary(min_size=1, max_size=64))
    return kind, draw(st.binary(min_size=1, max_size=256))


@FUZZ
@given(data=st.data())
def test_fuzz_checkpoints(scratch, checkpoint, data, capsys):
    """A damaged or edited checkpoint is refused in one line, or (damage the format does not read, such as a
    zip timestamp) resumed to exactly the numbers of the undamaged run."""
    name, raw, expected = checkpoint
    kind, bad = data.draw(damage(raw), label="damage")
    d = scratch / f"ckpt{next(_FILES)}"
    d.mkdir()
    (d / name).write_bytes(bad)
    argv = [*CKPT_RUN, "--checkpoint", str(d)]
    code, out, err = run(argv, capsys, cls="checkpoint")
    check_outcome(argv, code, out, err, "checkpoint")
    if code == 0:
        got = strict_loads(out)
        assert got["trees"] == 40 and got["results"] == expected["results"], f"{kind}: resumed other numbers"


# --- environment variables ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile_paths(tmp_path_factory):
    """Paths a hostile environment names: a file, a path under a file, unwritable or impossible places."""
    d = tmp_path_factory.mktemp("fuzz_env")
    (d / "a_file").write_text("x")
    return {
        "a file": str(d / "a_file"),
        "under a file": str(d / "a_file" / "sub"),
        "unwritable folder": "/proc/brwsim_fuzz",
        "read-only folder": "/proc/self",
        "a device": "/dev/null",
        "under a device": "/dev/null/out",
        "too long a name": str(d / ("x" * 300)),
        "a newline": str(d / "new\nline"),
        "no such user": "~brwsim_no_such_user/out",
        "a new folder": str(d / "new" / "deeper"),
    }


@FUZZ
@given(
    var=st.sampled_from(["BRWSIM_OUT", "BRWSIM_CACHE", "BRWSIM_XLA_CACHE"]),
    where=st.sampled_from(["a file", "under a file", "unwritable folder", "read-only folder", "a device",
                           "under a device", "too long a name", "a newline", "no such user", "a new folder"]),
    command=st.sampled_from(["simulate", "reproduce"]),
)  # fmt: skip
def test_fuzz_environment(hostile_paths, var, where, command, capsys):
    """A hostile output root or cache is one line (exit 2) before any work; a usable one changes nothing."""
    import jax

    value = hostile_paths[where]
    if var != "BRWSIM_OUT" and where == "a new folder":
        value = "off" if var == "BRWSIM_XLA_CACHE" else value  # never move this process's compilation cache
    saved = {k: os.environ.get(k) for k in ("BRWSIM_OUT", "BRWSIM_CACHE", "BRWSIM_XLA_CACHE")}
    cache_dir = jax.config.jax_compilation_cache_dir
    if command == "simulate":
        argv = ["simulate", "--law", "fixed:probs=0.5/0.5", "--P", "1,2", "--trees", "4", "--json"]
    else:  # stops at --only after the output root is checked: no experiment runs
        argv = ["reproduce", "--quick", "--only", "nosuch"]
    try:
        os.environ[var] = value
        if var == "BRWSIM_CACHE":
            os.environ.pop("BRWSIM_XLA_CACHE", None)  # the cache's place comes from BRWSIM_CACHE
        code, out, err = run(argv, capsys, cls="environment")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        jax.config.update("jax_compilation_cache_dir", cache_dir)
    check_outcome([f"{var}={value!r}", *argv], code, out, err, "environment")
    if command == "reproduce":
        assert code == 2 and ("BRWSIM_OUT" in err or "unknown experiment" in err or var != "BRWSIM_OUT"), err


# --- extreme drafter parameters on a small law -------------------------------------------------------------------

EXTREME_DRAFTERS = ["eagle:depth=200", "eagle:top_k=1000000000", "sequoia:depth=1000000", "static:k=1000000000",
                    "eagle:top_k=1000000000,depth=200", "sequoia:depth=1000000,samples=64", "static:k=2,depth=1000000",
                    "chain:depth=1000000", "eagle:depth=-1", "sequoia:samples=0", "static:k=0"]  # fmt: skip


@FUZZ
@given(
    drafter=st.sampled_from(EXTREME_DRAFTERS),
    law=st.sampled_from(["fixed:probs=0.6/0.3/0.1", "zipf:V=8,s=1.5", "dirichlet:V=6,alpha=0.3", "fixed:probs=1"]),
    P=st.lists(st.integers(1, 8), min_size=1, max_size=3).map(lambda ps: ",".join(map(str, sorted(set(ps))))),
    trees=st.integers(1, 4).map(str),
    as_json=st.booleans(),
)
def test_fuzz_extreme_drafters(drafter, law, P, trees, as_json, capsys):
    argv = ["simulate", "--law", law, "--P", P, "--trees", trees, "--drafter", drafter]
    argv += ["--json"] if as_json else []
    check_outcome(argv, *run(argv, capsys, cls="drafter"), "drafter")


# --- a name the OS will not look up (found by the environment class): one line, never a traceback -----------------


@pytest.mark.parametrize(
    "argv, env, needle",
    [
        (["reproduce", "--quick", "--only", "nosuch"], "BRWSIM_OUT", "is not a usable path (File name too long)"),
        (["plan", "--from-json", "LONG.json", "--hardware", "h100"], None, "is not a usable path"),
        (["plan", "--acceptance", "LONG.pt", "--hardware", "h100", "--params", "1e9"], None, "no such file"),
        (["simulate", "--law", "fixed:probs=1", "--P", "1", "--trees", "2"], "BRWSIM_CACHE", "XLA compilation cache"),
    ],
)
def test_names_too_long_are_one_line(tmp_path, capsys, monkeypatch, argv, env, needle):
    long = str(tmp_path / ("x" * 300))
    argv = [a.replace("LONG", long) for a in argv]
    if env:
        monkeypatch.setenv(env, long)
        monkeypatch.delenv("BRWSIM_XLA_CACHE", raising=False)
    code, out, err = run(argv, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err


def test_a_long_comma_list_of_rates_is_a_vector_not_a_file_name(capsys):
    rates = ",".join(["0.001"] * 100)  # 599 characters: too long for a file name, a fine vector
    argv = ["plan", "--acceptance", rates, "--hardware", "h100", "--params", "1e9", "--P", "1,2", "--json"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert strict_loads(out)
