"""A hostile user at the command line: random hostile inputs by class, each run in its own process and judged.

Every run must end as one of: ``ok`` (exit 0; any JSON strict; for a law whose tree is deterministic, E[X]
equal to the enumerated value and every rigorous bound at or above it), ``refused`` (exit 2, exactly one
``brwsim: error:`` line on stderr, nothing on stdout) or, for a signal case, ``stopped`` (exit 128 + the signal,
the finished work on stdout, one line on stderr besides progress lines and the note that the stop waits for a
computation in progress). Anything else is a finding, counted by kind:

- ``traceback``: a Python traceback, or an exit code that is none of the above;
- ``hang``: no exit within the case's time limit (the process group is killed) and no progress line with an
  estimate of the time left in the last 90 seconds (such a run is ``slow``: valid, heavy, and telling the user how
  long it will take; counted, not a finding);
- ``blowup``: resident memory past ``--memory-gb`` (the process group is killed);
- ``wrong``: exit 0 with a number that contradicts an exact answer or a rigorous bound;
- ``false_refusal``: a request known to be valid and cheap refused;
- ``noisy``: a refusal or a stop with more than one stderr line.

Classes (``--classes``): laws (extreme SPECs), markov (malformed and many-state Markov files), pools (malformed
.npz pools), checkpoints (corrupted, edited, or their law file changed under the same path), drafters (extreme
drafter parameters; draft laws past float32's ends, whose E[X] must stay in (0, the oracle's]), signals (SIGINT,
SIGTERM, SIGHUP to a running simulate), plan (plan's numeric options and paths), env (BRWSIM_OUT), llm (the
real-model command's options; slow: a model load per case), models (broken copies of the shipped model). A success
that prints a Python warning is ``noisy`` too.

Long run (one core, about an hour)::

    python tools/hostile.py --minutes 60 --seed 1 --json > hostile.json

A quick look: ``python tools/hostile.py --cases 40 --classes laws,markov,checkpoints``. Before and after a change,
the same seed gives the same cases: ``git worktree add /tmp/old COMMIT`` and ``--repo /tmp/old``. The per-case log
(``--log FILE``) holds every command, its outcome and the first stderr lines.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout: brwsim importable uninstalled
sys.path.insert(0, ROOT)
CODE = [ROOT]  # the checkout whose brwsim the cases run (--repo replaces it)
BRWSIM = [sys.executable, "-m", "brwsim"]
OK_EXIT = {0}


@dataclass
class Case:
    cls: str
    argv: list[str]
    expect: str = "either"  # "valid" (must succeed), "invalid" (must be refused), "either"
    env: dict = field(default_factory=dict)
    timeout: float = 120.0
    send: tuple[int, float] | None = None  # (signal, seconds after start)
    exact: list[float] | None = None  # exact E[X] per P of a deterministic tree (simulate --json)
    check: object = None  # a callable(stdout) -> str | None (a "wrong" finding's reason)
    after: object = None  # a callable() -> Case | None: a second run (checkpoint cases)


# ---------------------------------------------------------------- running and judging


def _rss_bytes(pgid: int) -> int:
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.getpgid(int(pid)) != pgid:
                continue
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    return total


def run(case: Case, memory_gb: float, cwd: str) -> dict:
    """Run one case in a process group of its own; watch its memory; kill the group on a hang or a blow-up."""
    path = os.pathsep.join([CODE[0], *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **case.env}
    t0 = time.monotonic()
    p = subprocess.Popen(
        BRWSIM + case.argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, start_new_session=True, text=True, errors="replace",
    )  # fmt: skip
    state = {"peak": 0, "killed": None, "progress_at": None}

    def watch():
        sent = False
        while p.poll() is None:
            el = time.monotonic() - t0
            rss = _rss_bytes(p.pid)
            state["peak"] = max(state["peak"], rss)
            if rss > memory_gb * 2**30:
                state["killed"] = "blowup"
            elif el > case.timeout:
                state["killed"] = "hang"
            if state["killed"]:
                _kill(p.pid)
                return
            if case.send and not sent and el >= case.send[1]:
                os.killpg(p.pid, case.send[0]) if case.send[0] == signal.SIGINT else p.send_signal(case.send[0])
                sent = True
            time.sleep(0.1)

    err_lines: list[str] = []

    def read_err():  # line by line, to note when the run last said how long it has left
        for line in p.stderr:
            err_lines.append(line)
            if line.startswith(PROGRESS) and "left (estimate)" in line:
                state["progress_at"] = time.monotonic() - t0

    w = threading.Thread(target=watch, daemon=True)
    e = threading.Thread(target=read_err, daemon=True)
    w.start()
    e.start()
    try:
        out = p.stdout.read()
        p.wait()
    finally:
        _kill(p.pid)
        w.join(5)
        e.join(5)
    err = "".join(err_lines)
    return {"code": p.returncode, "out": out, "err": err, "seconds": time.monotonic() - t0, **state}


def _kill(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _strict_json(text: str):
    def bad(c):
        raise ValueError(f"non-strict JSON constant {c}")

    return json.loads(text, parse_constant=bad)


PROGRESS = "brwsim: progress: "  # a long run's progress lines on stderr (not noise)
# the documented note when a signal's handler has not run 2 s after it (a computation in progress): not noise either
PENDING = re.compile(r"brwsim: SIG[A-Z]+: stopping after the computation in progress")


def judge(case: Case, r: dict) -> str:
    """The outcome's kind (see the module's docstring)."""
    slow = r.get("progress_at") is not None and r["seconds"] - r["progress_at"] < 90
    if r["killed"] == "hang" and slow and not case.send and case.expect != "invalid":  # a signal or a refusal due
        return "slow"
    if r["killed"]:
        return r["killed"]
    err_lines = [x for x in r["err"].splitlines() if x.strip() and not x.startswith(PROGRESS) and not PENDING.match(x)]
    if "Traceback (most recent call last)" in r["err"]:
        return "traceback"
    if case.send:
        want = 128 + case.send[0]
        if r["code"] == 0:
            return "ok"  # finished before the signal came
        if r["code"] != want:
            return "traceback"
        return "stopped" if len(err_lines) == 1 else "noisy"
    if r["code"] == 2:
        one = len(err_lines) == 1 and re.match(r"brwsim( \w+)?: error: ", err_lines[0])  # the command's or argparse's
        if not one or r["out"].strip():
            return "noisy"
        return "false_refusal" if case.expect == "valid" else "refused"
    if r["code"] != 0:
        return "blowup" if "RESOURCE_EXHAUSTED" in r["err"] or r["code"] == -9 else "traceback"
    if case.expect == "invalid":
        return "wrong"
    outcome = _check_output(case, r["out"])
    if outcome == "ok" and any("Warning:" in x for x in err_lines):  # a success printing Python's or a library's
        return "noisy"  # warnings (a wrong number that warns too counts as wrong)
    return outcome


def _check_output(case: Case, out: str) -> str:
    if "--json" in case.argv:
        try:
            d = _strict_json(out)
        except ValueError:
            return "wrong"
        if case.exact is not None and _exact_wrong(d, case.exact):
            return "wrong"
    if case.check is not None and case.check(out):
        return "wrong"
    return "ok"


RIGOROUS = ("dual", "splitting", "renewal")


def _exact_wrong(d: dict, exact: list[float]) -> bool:
    """E[X] of a deterministic tree is exact (every tree is the same); each rigorous upper bound is at or above it."""
    for row, ex in zip(d.get("results", []), exact, strict=False):
        if not math.isclose(row["mean"], ex, rel_tol=1e-5, abs_tol=1e-9):
            return True
        bounds = row.get("bounds") or {}
        for name in RIGOROUS:
            value = bounds.get(name)
            if not isinstance(value, (int, float)) or value >= ex:
                continue
            # a spine bound is a one-sided 97.5% confidence value: below the truth by chance 2.5% of the time, but
            # never when its standard error is 0 (a deterministic walk) and never by 4 standard errors
            se = row.get(f"{name}_se") or 0.0
            if se == 0.0 or value + 4 * se < ex:
                return True
    return False


# ---------------------------------------------------------------- exact answers


def exact_fixed(probs: list[float], P_list: list[int]) -> list[float]:
    """E[X] of the oracle on the deterministic tree of a fixed law (the sum of the P largest path probabilities)."""
    from brwsim.testing import enumerate_fixed

    values = enumerate_fixed(probs, max(P_list))
    return [float(values[P - 1]) for P in P_list]


# ---------------------------------------------------------------- the classes


EXTREME = ["0", "-1", "nan", "inf", "1e-300", "5e-324", "1e300", "abc", ""]


def _fixed_probs(rng: random.Random) -> list[float]:
    kind = rng.choice(["peaked", "subnormal", "tied", "ordinary", "many"])
    if kind == "peaked":
        eps = 10 ** -rng.uniform(3, 12)
        return [1 - eps, eps]
    if kind == "subnormal":
        tiny = rng.choice([5e-324, 1e-310, 1e-45, 1e-38])
        k = rng.randint(1, 3)
        return [1.0 - k * tiny] + [tiny] * k
    if kind == "tied":
        n = rng.randint(1, 8)
        return [1.0 / n] * n
    if kind == "many":
        w = [rng.random() ** 4 for _ in range(rng.randint(50, 400))]
        return [x / sum(w) for x in w]
    w = [rng.random() for _ in range(rng.randint(1, 6))]
    return [x / sum(w) for x in w]


def case_laws(rng: random.Random, tmp: str) -> Case:
    P = sorted(set(rng.choice([[1], [1, 4], [1, 4, 16], [64], [2, 256]])))
    Ps = ",".join(map(str, P))
    if rng.random() < 0.45:
        probs = _fixed_probs(rng)
        spec = "fixed:probs=" + "/".join(f"{x:.17g}" for x in probs)
        if rng.random() < 0.3:
            spec = f"temp:T={rng.choice(['1', '2', '0.5', '1e-30', '1e30'])},law={spec}"
            exact = None
        else:
            exact = exact_fixed(probs, P)
        cmd = rng.choice(["simulate", "laws"])
        if cmd == "laws":
            return Case("laws", ["laws", "--law", spec], expect="valid", timeout=90)
        argv = ["simulate", "--law", spec, "--P", Ps, "--trees", str(rng.choice([4, 50])), "--json"]
        return Case("laws", argv, expect="valid", timeout=120, exact=exact)
    fam = rng.choice(["dirichlet", "logitnormal", "zipf"])
    V = rng.choice([10**3, 10**5, 10**6, 10**7, 10**9, 10**12, 2**31, 2**63])
    par = {"dirichlet": f"alpha={rng.choice(['0.1', '1e-6', '50'])}", "logitnormal": "sigma=3",
           "zipf": f"s=1.1,s_sd={rng.choice(['0', '0.5'])}"}[fam]  # fmt: skip
    spec = f"{fam}:V={V},{par}"
    if rng.random() < 0.5:
        return Case("laws", ["laws", "--law", spec], timeout=120)
    return Case("laws", ["simulate", "--law", spec, "--P", Ps, "--trees", str(rng.choice([4, 20])), "--json"])


MARKOV_BASE = None


def _markov_base() -> dict:
    global MARKOV_BASE
    if MARKOV_BASE is None:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        with open(os.path.join(here, "examples", "two_state.json")) as f:
            MARKOV_BASE = json.load(f)
    return json.loads(json.dumps(MARKOV_BASE))


def _junk(rng: random.Random):
    return rng.choice(["abc", {}, [], None, -1, 1e300, float("nan"), [1, "x"], {"a": "abc"}, True, 2**70])


def _mutate(rng: random.Random, obj):
    """Replace one value somewhere inside ``obj`` with junk, or drop or add a key, or add a list entry."""
    if isinstance(obj, dict) and obj:
        k = rng.choice(list(obj))
        r = rng.random()
        if r < 0.15:
            del obj[k]
        elif r < 0.25:
            obj["extra_key"] = _junk(rng)
        elif r < 0.6 and isinstance(obj[k], (dict, list)):
            _mutate(rng, obj[k])
        else:
            obj[k] = _junk(rng)
    elif isinstance(obj, list) and obj:
        i = rng.randrange(len(obj))
        r = rng.random()
        if r < 0.2:
            obj.append(json.loads(json.dumps(obj[i])))
        elif r < 0.6 and isinstance(obj[i], (dict, list)):
            _mutate(rng, obj[i])
        else:
            obj[i] = _junk(rng)
    return obj


def _many_states(rng: random.Random, n: int) -> dict:
    """A valid Markov law of n states, each a fixed law, its kernel rows random (by rank, last row the rest)."""
    names = [f"s{i}" for i in range(n)]
    states, kernel = {}, {}
    for name in names:
        w = [rng.random() + 0.05 for _ in range(rng.randint(2, 5))]
        states[name] = "fixed:probs=" + "/".join(f"{x / sum(w):.17g}" for x in w)
        rows = []
        for _ in range(3):
            w = [rng.random() for _ in range(n)]
            rows.append([x / sum(w) for x in w])
        kernel[name] = rows
    return {"states": states, "initial": names[0], "kernel": kernel}


def case_markov(rng: random.Random, tmp: str) -> Case:
    path = os.path.join(tmp, f"m{rng.randrange(10**9)}.json")
    if rng.random() < 0.3:
        n = rng.choice([5, 20, 60, 200])
        doc, expect = _many_states(rng, n), "either"
    else:
        doc, expect = _mutate(rng, _markov_base()), "either"
    with open(path, "w") as f:
        f.write(json.dumps(doc, allow_nan=True))
    cmd = rng.choice(["simulate", "laws"])
    argv = ["laws", "--law", path] if cmd == "laws" else ["simulate", "--law", path, "--P", "1,16", "--trees", "50"]
    return Case("markov", argv, expect=expect, timeout=150)


def case_pools(rng: random.Random, tmp: str) -> Case:
    import numpy as np

    path = os.path.join(tmp, f"p{rng.randrange(10**9)}.npz")
    n, k = rng.choice([(0, 4), (1, 1), (5, 3), (100, 64)])
    arrays = {}
    kind = rng.choice(["ok", "nan", "negative", "unnormalised", "wrongname", "wrongshape", "strings", "empty"])
    top = np.sort(np.random.default_rng(rng.randrange(2**32)).dirichlet(np.ones(k), size=max(n, 1)), axis=1)[:, ::-1]
    logp = np.log(top)
    if kind == "nan":
        logp[0, 0] = np.nan
    if kind == "negative":
        logp = -logp
    if kind == "unnormalised":
        logp = logp + 1.0
    if kind == "wrongshape":
        logp = logp.ravel()
    if kind == "strings":
        logp = np.array(["a"] * 3)
    arrays = {} if kind == "empty" else {("logits" if kind == "wrongname" else "logp"): logp}
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    argv = rng.choice([["laws", "--law", path], ["simulate", "--law", path, "--P", "1,4", "--trees", "20"]])
    return Case("pools", argv, timeout=120)


def _ckpt_corrupt(rng: random.Random, d: str) -> str:
    files = sorted(os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs)
    if not files:
        return "none"
    f = rng.choice(files)
    how = rng.choice(["truncate", "zero", "flip", "edit_done", "junk"])
    data = open(f, "rb").read()
    if how == "truncate":
        data = data[: max(1, len(data) // 2)]
    elif how == "zero":
        data = b""
    elif how == "flip" and data:
        i = rng.randrange(len(data))
        data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]
    elif how == "edit_done":
        data = data.replace(b'"done": ', b'"done": 1').replace(b'"done":', b'"done":1')
    else:
        data = rng.randbytes(64)
    open(f, "wb").write(data)
    return how


def case_checkpoints(rng: random.Random, tmp: str) -> Case:
    d = tempfile.mkdtemp(dir=tmp)
    if rng.random() < 0.5:
        law = os.path.join(d, "law.json")
        doc = _markov_base()
        with open(law, "w") as f:
            json.dump(doc, f)
        argv = ["simulate", "--law", law, "--P", "1,4", "--trees", "4000", "--round-trees", "1000", "--seed", "3"]
        argv += ["--checkpoint", os.path.join(d, "ck"), "--json"]

        def change_then_rerun():
            new = _many_states(rng, 2)
            with open(law, "w") as f:
                json.dump(new, f)
            fresh = os.path.join(d, "fresh.json")
            with open(fresh, "w") as f:
                json.dump(new, f)
            ref = argv[:2] + [fresh] + argv[3:-3] + ["--json"]
            want = run(Case("checkpoints", ref), 8, os.getcwd())

            def differs(out: str) -> str | None:
                try:
                    a, b = _strict_json(out)["results"], _strict_json(want["out"])["results"]
                except (ValueError, KeyError):
                    return "unreadable"
                return None if [r["mean"] for r in a] == [r["mean"] for r in b] else "resumed a changed law"

            return Case("checkpoints", argv, check=differs)

        return Case("checkpoints", argv, expect="valid", after=change_then_rerun)
    argv = ["simulate", "--law", "dirichlet:V=50,alpha=0.3", "--P", "1,4", "--trees", "3000", "--round-trees", "500"]
    argv += ["--checkpoint", os.path.join(d, "ck"), "--json"]

    def corrupt_then_rerun():
        _ckpt_corrupt(rng, os.path.join(d, "ck"))
        return Case("checkpoints", argv)

    return Case("checkpoints", argv, expect="valid", after=corrupt_then_rerun)


DRAFT_LAWS = [  # a draft law's parameters at and past float32's ends: each q's limit, never a row of -inf
    "temp:T=1e-300", "temp:T=5e-324", "temp:T=1e-40", "temp:T=1e40", "temp:T=1e300", "noise:sigma=1e300",
    "noise:sigma=1e30", "noise:sigma=0", "mix:w=0.999999999,law=zipf:V=3,s=1e300", "mix:w=0,law=fixed:probs=1",
    "mix:w=0.9999999999999999,law=dirichlet:V=3,alpha=1e-300",
]  # fmt: skip


def case_draft_laws(rng: random.Random) -> Case:
    """A drafter with an extreme draft law on a fixed law: its E[X] is above 0 (every token of the law has p > 0,
    so the first drafted token is accepted with positive probability) and at most the oracle's exact value."""
    probs = [0.6, 0.3, 0.1]
    P_list = [1, 4]
    oracle = exact_fixed(probs, P_list)
    dl = rng.choice(DRAFT_LAWS)
    argv = ["simulate", "--law", "fixed:probs=0.6/0.3/0.1", "--P", "1,4", "--trees", "20"]
    argv += ["--drafter", rng.choice(["topq", "chain", "sequoia"]), "--draft-law", dl, "--json"]

    def beyond(out: str) -> str | None:
        rows = json.loads(out).get("results", [])
        if len(rows) != len(oracle):
            return f"{len(rows)} result rows for P = 1, 4"
        for row, top in zip(rows, oracle, strict=True):
            if not 0 < row["mean"] <= top + 4 * (row.get("se") or 0.0) + 1e-6:
                return f"E[X] {row['mean']} at P = {row['P']} outside (0, {top}]"
        return None

    return Case("drafters", argv, timeout=120, check=beyond)


def case_drafters(rng: random.Random, tmp: str) -> Case:
    if rng.random() < 0.4:
        return case_draft_laws(rng)
    big = rng.choice(["1", "7", "200", "1000000", "1000000000", "0", "-3", "nan"])
    d = rng.choice([f"eagle:depth={big}", f"eagle:top_k={big}", f"eagle:top_k=10,depth={big}", f"sequoia:depth={big}",
                    f"static:k={big}", "chain", "topq", f"eagle:top_k={big},depth={big}"])  # fmt: skip
    law = rng.choice(["dirichlet:V=100,alpha=0.2", "fixed:probs=0.6/0.3/0.1", "zipf:V=1000,s=1.2"])
    argv = ["simulate", "--law", law, "--P", rng.choice(["1,16", "64"]), "--trees", "20", "--drafter", d, "--json"]
    return Case("drafters", argv, timeout=120)


def case_signals(rng: random.Random, tmp: str) -> Case:
    sig = rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
    argv = ["simulate", "--law", "dirichlet:V=300,alpha=0.1", "--P", "1,64", "--trees", "400000", "--round-trees",
            "2000", "--json"]  # fmt: skip
    if rng.random() < 0.5:
        argv += ["--checkpoint", tempfile.mkdtemp(dir=tmp)]
    return Case("signals", argv, send=(sig, rng.uniform(4, 12)), timeout=90)


def case_plan(rng: random.Random, tmp: str) -> Case:
    argv = ["plan", "--law", "dirichlet:V=100,alpha=0.3", "--P", "1,4,16", "--trees", "50"]
    r = rng.random()
    if r < 0.4:
        argv += ["--hardware", "h100", "--params", rng.choice(EXTREME + ["8e9"])]
        argv += ["--overhead", rng.choice(EXTREME + ["0", "1e-5"])]
    elif r < 0.7:
        path = rng.choice([tmp + "/", tmp + "/missing.json", "/etc/passwd", "/dev/null"])
        argv = ["plan", "--from-json", path, "--hardware", "h100"]
    else:
        argv += ["--hardware", rng.choice(["h100", "custom:bw=0,flops=1", "custom:bw=nan,flops=1e12", "csv:/dev/null",
                                           "csv:" + tmp, "nonsense", "cpu-roofline"])]  # fmt: skip
        argv += ["--draft-pass-seconds", rng.choice(EXTREME + ["0.001"])]
    return Case("plan", argv, timeout=180)


def case_env(rng: random.Random, tmp: str) -> Case:
    f = os.path.join(tmp, "a_file")
    open(f, "w").close()
    out = rng.choice([f, f + "/sub", "/proc/version", "/dev/null/x", ""])
    return Case("env", ["reproduce", "--quick", "--only", "collapse"], env={"BRWSIM_OUT": out}, timeout=300)


def case_llm(rng: random.Random, tmp: str) -> Case:
    argv = ["llm", "--n", "1", "--walks", "16", "--depth", "4", "--P", "1,4", "--trees", "20"]
    opt = rng.choice(["--max-prompt-tokens", "--threads", "--prompts", "--record", "--save-pool", "--temperature"])
    vals = {"--max-prompt-tokens": ["0", "-3", "-100000", "1", "100000000"], "--threads": ["0", "-1", "100000"],
            "--prompts": [",,", "", " ", tmp, os.path.join(tmp, "none.jsonl")],
            "--record": [tmp, os.path.join(tmp, "no/such/x.npz"), "/proc/version"],
            "--save-pool": [os.path.join(tmp, "a_file"), "/proc/x", os.path.join(tmp, "no/such")],
            "--temperature": ["0", "-1", "1e30", "1e-30", "nan", "inf"]}  # fmt: skip
    open(os.path.join(tmp, "a_file"), "w").close()
    return Case("llm", argv + [opt, rng.choice(vals[opt])], timeout=300)


def case_models(rng: random.Random, tmp: str) -> Case:
    src = os.path.expanduser("~/.cache/brwsim/models/smollm2-135m")
    d = tempfile.mkdtemp(dir=tmp)
    if os.path.isdir(src):
        for name in os.listdir(src):
            if os.path.isfile(os.path.join(src, name)):
                os.symlink(os.path.join(src, name), os.path.join(d, name))
    how = rng.choice(["truncate", "garbage", "empty", "vocab", "bert", "no_config", "no_weights"])
    st = os.path.join(d, "model.safetensors")
    cfg = os.path.join(d, "config.json")
    if how in ("truncate", "garbage", "empty") and os.path.lexists(st):
        data = open(st, "rb").read(4096) if how == "truncate" else (rng.randbytes(4096) if how == "garbage" else b"")
        os.unlink(st)
        open(st, "wb").write(data)
    elif how in ("vocab", "bert") and os.path.lexists(cfg):
        c = json.load(open(cfg))
        c.update({"vocab_size": 1000} if how == "vocab" else {"model_type": "bert"})
        os.unlink(cfg)
        json.dump(c, open(cfg, "w"))
    elif how == "no_config" and os.path.lexists(cfg):
        os.unlink(cfg)
    elif os.path.lexists(st):
        os.unlink(st)
    argv = ["llm", "--model", d, "--n", "1", "--walks", "16", "--depth", "4", "--P", "1,4", "--trees", "20"]
    return Case("models", argv, timeout=300)


CLASSES = {
    "laws": case_laws, "markov": case_markov, "pools": case_pools, "checkpoints": case_checkpoints,
    "drafters": case_drafters, "signals": case_signals, "plan": case_plan, "env": case_env, "llm": case_llm,
    "models": case_models,
}  # fmt: skip
FAST = ["laws", "markov", "pools", "checkpoints", "drafters", "signals", "plan"]
BAD = ("traceback", "hang", "blowup", "wrong", "false_refusal", "noisy")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--classes", default=",".join(FAST), help=f"comma list of {', '.join(CLASSES)} (or 'all')")
    ap.add_argument("--cases", type=int, default=None, help="stop after this many cases")
    ap.add_argument("--minutes", type=float, default=None, help="stop starting cases after this many minutes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--memory-gb", type=float, default=6.0, help="resident memory counted as a blow-up (default 6)")
    ap.add_argument("--repo", default=None, help="run the brwsim of this checkout (a git worktree)")
    ap.add_argument("--log", default=None, help="append one JSON line per case to this file")
    ap.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    args = ap.parse_args(argv)
    names = list(CLASSES) if args.classes == "all" else [c.strip() for c in args.classes.split(",") if c.strip()]
    unknown = [c for c in names if c not in CLASSES]
    if unknown or not names:
        ap.error(f"unknown class {unknown}: choose from {', '.join(CLASSES)}")
    if args.cases is None and args.minutes is None:
        args.cases = 4 * len(names)
    if args.repo:
        CODE[0] = os.path.abspath(args.repo)
        os.chdir(args.repo)
    rng = random.Random(args.seed)
    counts: dict[str, Counter] = {c: Counter() for c in names}
    tmp = tempfile.mkdtemp(prefix="brwsim-hostile-")
    log = open(args.log, "a") if args.log else None
    t_end = time.monotonic() + 60 * args.minutes if args.minutes else math.inf
    n = 0
    try:
        while (args.cases is None or n < args.cases) and time.monotonic() < t_end:
            cls = names[n % len(names)]
            case = CLASSES[cls](rng, tmp)
            outcome, r = _run_case(case, args.memory_gb)
            counts[cls][outcome] += 1
            n += 1
            line = {"class": cls, "argv": case.argv, "env": case.env, "outcome": outcome, "code": r["code"],
                    "seconds": round(r["seconds"], 2), "peak_gb": round(r["peak"] / 2**30, 2),
                    "stderr": r["err"].strip().splitlines()[-3:]}  # fmt: skip
            if log:
                log.write(json.dumps(line) + "\n")
                log.flush()
            if not args.json:
                mark = "!!" if outcome in BAD else "  "
                print(f"{mark} {outcome:<13} {cls:<11} {r['seconds']:6.1f}s {' '.join(case.argv)[:150]}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if log:
            log.close()
    summary = {c: dict(v) for c, v in counts.items()}
    total = Counter()
    for v in counts.values():
        total.update(v)
    result = {"cases": n, "seed": args.seed, "per_class": summary, "total": dict(total),
              "findings": sum(total[k] for k in BAD)}  # fmt: skip
    print(json.dumps(result, indent=None if args.json else 1))
    return 1 if result["findings"] else 0


def _run_case(case: Case, memory_gb: float):
    r = run(case, memory_gb, os.getcwd())
    outcome = judge(case, r)
    if case.after is not None and outcome in ("ok", "refused"):
        second = case.after()
        if second is not None:
            r2 = run(second, memory_gb, os.getcwd())
            o2 = judge(second, r2)
            r2["seconds"] += r["seconds"]
            return o2, r2
    return outcome, r


if __name__ == "__main__":
    sys.exit(main())
