"""Break each formula on purpose in a scratch copy of the repository and check that the tests go red.

    python tools/mutation_check.py [TEST FILES...]

Each mutation below replaces one exact line of a formula (a closed form, the
confidence margin, the Markov rank dependence, the long-run law, a moment) in
a detached git worktree of HEAD, runs the tests (``-x``: the first failure
ends it) and prints RED (some test caught it) or GREEN (nothing did: a gap in
the suite). The worktree is removed at the end.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DST = os.path.join(tempfile.gettempdir(), "brwsim-mutation-check")
MUTATIONS = [
    (
        "renewal: drop the -1",
        "brwsim/theory/_closed_forms.py",
        "return (math.log(mu * P) + 1) / mu + mu2 / (mu * mu) - 1",
        "return (math.log(mu * P) + 1) / mu + mu2 / (mu * mu)",
    ),
    (
        "renewal: ln(P) for ln(mu P)",
        "brwsim/theory/_closed_forms.py",
        "return (math.log(mu * P) + 1) / mu + mu2 / (mu * mu) - 1",
        "return (math.log(P) + 1) / mu + mu2 / (mu * mu) - 1",
    ),
    (
        "asymptotic: constant mu2/mu^2 for mu2/(2 mu^2)",
        "brwsim/theory/_closed_forms.py",
        "return math.log(mu * P) / mu + mu2 / (2 * mu * mu) - 1",
        "return math.log(mu * P) / mu + mu2 / (mu * mu) - 1",
    ),
    (
        "asymptotic: ln(P) for ln(mu P)",
        "brwsim/theory/_closed_forms.py",
        "return math.log(mu * P) / mu + mu2 / (2 * mu * mu) - 1",
        "return math.log(P) / mu + mu2 / (2 * mu * mu) - 1",
    ),
    (
        "theorem1: divide by mu, not mu^2",
        "brwsim/theory/_closed_forms.py",
        "return (mu + mu2) * math.log(P) / (mu * mu)",
        "return (mu + mu2) * math.log(P) / mu",
    ),
    ("margin sign: estimate - z se", "brwsim/spine/_curves.py", "up = est + z * se", "up = est - z * se"),
    ("margin z: 1.645 (one-sided 95%)", "brwsim/_stats.py", "MARGIN_Z = 1.96", "MARGIN_Z = 1.645"),
    (
        "Markov spine walks ignore the child's rank",
        "brwsim/spine/_walks.py",
        "s_next = law.child_state(jax.random.fold_in(k, 1), jnp.int32(state), r)",
        "s_next = law.child_state(jax.random.fold_in(k, 1), jnp.int32(state), jnp.zeros_like(r))",
    ),
    (
        "Markov trees ignore the child's rank",
        "brwsim/laws/_markov.py",
        "row = self.log_kernel[parent_state, jnp.minimum(rank, R - 1)]",
        "row = self.log_kernel[parent_state, 0 * jnp.minimum(rank, R - 1)]",
    ),
    (
        "long-run law: stationary eigenvector for every kernel (no Cesaro)",
        "brwsim/spine/_stationary.py",
        "if len(classes) == 1 and classes[0].size == Q.shape[0]:  # irreducible",
        "if True:",
    ),
    ("Zipf mu_2 off by 1%", "brwsim/laws/_zipf.py", "return float(h), float(m2)", "return float(h), float(m2) * 1.01"),
    (
        "second moment: sum p log p (not squared)",
        "brwsim/_moments.py",
        "xp.sum(ps * safe, axis=-1, dtype=sum_dtype)",
        "xp.sum(ps * safe * 0.99, axis=-1, dtype=sum_dtype)",
    ),
]


def main() -> int:
    tests = sys.argv[1:] or [
        "tests/test_theory.py",
        "tests/test_bounds_property.py",
        "tests/test_spine.py",
        "tests/test_laws.py",
        "tests/test_estimate.py",
    ]
    shutil.rmtree(DST, ignore_errors=True)
    subprocess.run(
        ["git", "-C", SRC, "worktree", "add", "-f", "--detach", DST, "HEAD"], check=True, capture_output=True
    )
    env = dict(os.environ, PYTHONPATH=DST)
    survivors = 0
    for name, path, old, new in MUTATIONS:
        f = os.path.join(DST, path)
        text = open(f).read()
        assert text.count(old) == 1, (name, text.count(old))
        open(f, "w").write(text.replace(old, new))
        t0 = time.time()
        p = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
            cwd=DST,
            env=env,
            capture_output=True,
            text=True,
        )
        survivors += p.returncode == 0
        failed = [l for l in p.stdout.splitlines() if l.startswith("FAILED")]
        print(f"{'RED  ' if p.returncode else 'GREEN'} {name}: {failed[:1]} ({time.time() - t0:.0f} s)", flush=True)
        open(f, "w").write(text)
    subprocess.run(["git", "-C", SRC, "worktree", "remove", "--force", DST], capture_output=True)
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
