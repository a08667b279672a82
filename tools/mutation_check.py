"""Mutation testing: hand-picked formula breaks, and mutmut over the core, one module at a time.

    python tools/mutation_check.py [TEST FILES...]          # the hand-picked formula breaks below
    python tools/mutation_check.py clusters [--before]      # plausible mistakes vs the exact tests (CLUSTERS)
    python tools/mutation_check.py mutmut MODULE [--before]  # mutmut on one core module (docs/testing.md)
    python tools/mutation_check.py mutmut-recheck MODULE [--unlisted] [--before]  # survivors again
    python tools/mutation_check.py mutmut-sample MODULE N [SEED] [--before]  # N random mutants not yet checked
    python tools/mutation_check.py mutmut-counts [--before] [MODULE...]  # as docs/testing.md's table
    python tools/mutation_check.py mutmut-all [--children N] [MODULE...]  # the full run, resumable (below)
    python tools/mutation_check.py native [NAME...]         # the C++ kernel's mistakes (NATIVE_MUTATIONS, below)

MODULE is a key of ``MODULES`` (``_stats``, ``spine``, ...). The mutmut mode
copies the working tree (brwsim/, tests/, pyproject.toml) to a scratch
directory, narrows ``[tool.mutmut]`` to that module's files and tests (the exact
tests ``tests/test_exact_*.py``; ``--before``: the module's own test files
instead), runs ``mutmut run`` under ``nice`` and prints mutmut's counts.
mutmut runs, for each mutant, only the selected tests that call the mutated
function. The exact tests alone are a lower bound on what the suite kills.
mutmut mutates function bodies only: module-level constants and decorated
(e.g. jitted) functions are not mutated, which is why the hand-picked list
below also breaks constants.

Each mutation below replaces one exact line of a formula (a closed form, the
confidence margin, the Markov rank dependence, the long-run law, a moment) in
a detached git worktree of HEAD, runs the tests (``-x``: the first failure
ends it) and prints RED (some test caught it) or GREEN (nothing did: a gap in
the suite). The worktree is removed at the end.

``mutmut-sample`` on a module with no scratch copy yet makes one first (mutmut generates the mutants and collects
the tests' coverage, and runs none), so that a module too large to run in full is only sampled.

``native`` does the same for the native kernel's C++ source (``NATIVE_MUTATIONS``: each a one-line mistake in
brwsim/data/oracle_native.cc; NAMEs: only the mutants whose name contains one of them) against its tests
(``NATIVE_TESTS``). The library is built again for each mutant (its cache key is the source) into a scratch cache
(``$BRWSIM_CACHE``), by a first process that must import the worktree's brwsim and build it: a mutant that does not
build is BUILD (not counted as killed), and its tests run anyway with ``BRWSIM_REQUIRE_NATIVE=1``, under which
tests/test_native.py fails instead of skipping (the harness checks that they noticed). The unmutated source runs
first and must build and pass.
"""

import glob
import json
import os
import random
import re
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
        "return float(np.nextafter(a + b - 1 + 8 * EPS64 * (abs(a) + b + 1), math.inf))",
        "return float(np.nextafter(a + b + 8 * EPS64 * (abs(a) + b + 1), math.inf))",
    ),
    (
        "renewal: ln(P) for ln(mu P)",
        "brwsim/theory/_closed_forms.py",
        "a, b = (math.log(mu * P) + 1) / mu, mu2 / (mu * mu)",
        "a, b = (math.log(P) + 1) / mu, mu2 / (mu * mu)",
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
    (
        "Zipf mu_2 off by 1%",
        "brwsim/laws/_zipf.py",
        "return float(h) + 0.0, float(m2)",
        "return float(h) + 0.0, float(m2) * 1.01",
    ),
    (
        "second moment: sum p log p (not squared)",
        "brwsim/_moments.py",
        "xp.sum(ps * safe, axis=-1, dtype=sum_dtype)",
        "xp.sum(ps * safe * 0.99, axis=-1, dtype=sum_dtype)",
    ),
]


NATIVE = "brwsim/data/oracle_native.cc"
# (name, exact old line, new line): one-line mistakes across the C++ kernel (the machine here has AVX2, so the
# lines of its #else branches are not compiled and not mutated); the first one does not compile (the harness check)
NATIVE_MUTATIONS = [
    ("build: a syntax error (must be BUILD, its tests failing)",
     "static inline void fold_in(const uint32_t* k0,", "static inline void fold_in(const uint32_t* k0 +,"),
    ("threefry: the last rotation 24 -> 25", "static const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};",
     "static const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 25}};"),
    ("threefry key schedule: round counter i, not i + 1", "x1 += ks[(i + 2) % 3] + uint32_t(i + 1);",
     "x1 += ks[(i + 2) % 3] + uint32_t(i);"),
    ("fold_in16: the second half's fourth injection reuses kb1",
     "TF_ROUND(17) TF_ROUND(29) TF_ROUND(16) TF_ROUND(24) TF_INJECT(4, ka1, ka2, kb1, kb2)",
     "TF_ROUND(17) TF_ROUND(29) TF_ROUND(16) TF_ROUND(24) TF_INJECT(4, ka1, ka2, kb1, kb1)"),
    ("randint: the two halves swapped", "uint32_t off = (hi % span) * mult + (lo % span);",
     "uint32_t off = (lo % span) * mult + (hi % span);"),
    ("hash_state: shift 15 -> 16", "h ^= h >> 15;", "h ^= h >> 16;"),
    ("order_key: -0.0 not folded onto +0.0", "if ((u & 0x7fffffffu) == 0) u = 0;  // -0.0 == +0.0",
     "// (no -0.0 case)"),
    ("order_key: negatives not complemented", "u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);",
     "u = (u & 0x80000000u) ? (u & 0x7fffffffu) : (u | 0x80000000u);"),
    ("value_of: negatives not complemented back", "u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;",
     "u = (u & 0x80000000u) ? (u & 0x7fffffffu) : u;"),
    ("heap sift_up: strict compare", "if (p >= x) break;", "if (p > x) break;"),
    ("heap replace_top: a lone left child not followed", "} else if (c > m) {", "} else if (c >= m) {"),
    ("flat frontier (pool): the last slot holding the maximum", "if (mask) return 8 * i + __builtin_ctz(mask);",
     "if (mask) return 8 * i + 31 - __builtin_clz(mask);"),
    ("flat search: >= on the odd slot left (ties to the later slot)",
     "__m256 g1 = _mm256_cmp_ps(c1, b1[h], _CMP_GT_OQ);", "__m256 g1 = _mm256_cmp_ps(c1, b1[h], _CMP_GE_OQ);"),
    ("flat search: the odd/even merge prefers the higher slot on a tie",
     "_mm256_castsi256_ps(_mm256_cmpgt_epi32(x0[h], x1[h]))));",
     "_mm256_castsi256_ps(_mm256_cmpgt_epi32(x1[h], x0[h]))));"),
    ("node_keys (eight at a time): tag 3 + rank", "tag[l] = 2u + uint32_t(rnk[h + l][i]);",
     "tag[l] = 3u + uint32_t(rnk[h + l][i]);"),
    ("node_keys (AVX2): trees 6 and 7's ranks swapped", "rnk[o + 4][i], rnk[o + 5][i], rnk[o + 6][i], rnk[o + 7][i]))",
     "rnk[o + 4][i], rnk[o + 5][i], rnk[o + 7][i], rnk[o + 6][i]))"),
    ("pool search: r + 1 <= K", "float nxt = (r + 1 < K) ? tab[p.row * K + r + 1] : -INFINITY;",
     "float nxt = (r + 1 <= K) ? tab[p.row * K + r + 1] : -INFINITY;"),
    ("drawn search: sort_more only past the sorted length",
     "if (r + 1 < K && r + 1 >= p.row) p.row = int32_t(sort_more(rows.data() + size_t(j) * K, p.row, r + 1, K));",
     "if (r + 1 < K && r + 1 > p.row) p.row = int32_t(sort_more(rows.data() + size_t(j) * K, p.row, r + 1, K));"),
    ("drawn search: r + 1 <= K", "float nxt = (r + 1 < K) ? rows[size_t(j) * K + r + 1] : -INFINITY;",
     "float nxt = (r + 1 <= K) ? rows[size_t(j) * K + r + 1] : -INFINITY;"),
    ("drawn search: child tag 1 + rank",
     "uint32_t pk0[LANES] = {p.k0}, pk1[LANES] = {p.k1}, tag[LANES] = {2u + uint32_t(r)}, c0[LANES], c1[LANES];",
     "uint32_t pk0[LANES] = {p.k0}, pk1[LANES] = {p.k1}, tag[LANES] = {1u + uint32_t(r)}, c0[LANES], c1[LANES];"),
    ("draw_row uniform: -log K, not -log V", "float lu = -std::log(float(V));", "float lu = -std::log(float(Kr));"),
    ("lazy rows: the whole row drawn one entry late", "if (r + 1 < K && r + 1 >= p.held)  // past",
     "if (r + 1 < K && r + 1 > p.held)  // past"),
    ("lazy rows: the whole row drawn from the key's words swapped", "p.row = int32_t(node_row(p.k0, p.k1, p.state,",
     "p.row = int32_t(node_row(p.k1, p.k0, p.state,"),
    ("lazy rows: the whole row drawn from the first state's law", "p.row = int32_t(node_row(p.k0, p.k1, p.state,",
     "p.row = int32_t(node_row(p.k0, p.k1, 0,"),
    ("lazy rows: a fresh row's first entries taken for the whole row",
     "*held = int32_t(Kr == std::min(L.K, L.V) ? L.K : Kr);", "*held = int32_t(L.K);"),
    ("zipf: log s taken as s", "L.logs = a;", "L.logs = std::log(std::fabs(a));"),
    ("zipf: the temperature applied to a point mass or uniform exponent",
     "const float c = (s == 0.0f || !(s < INFINITY)) ? s : s * L.scale;", "const float c = s * L.scale;"),
    ("top_k: >= the threshold (one by one, near the buffer's cut)", "if (w[t] > thr) {", "if (w[t] >= thr) {"),
    ("top_k: >= the threshold (AVX-512, sixteen at a time)", "_mm512_set1_ps(thr), _CMP_GT_OQ);",
     "_mm512_set1_ps(thr), _CMP_GE_OQ);"),
    ("top_k (AVX-512): a packed block's last entry dropped", "n += cnt;", "n += cnt - (cnt > 0);"),
    ("dirichlet accept (AVX-512): a block's rejected entries kept", "filled += __builtin_popcount(unsigned(m));",
     "filled += 16;"),
    ("dirichlet accept (AVX-512): the acceptance of the block's previous sixteen",
     "_mm512_test_epi32_mask(_mm512_load_si512(ok + i), _mm512_set1_epi32(-1));",
     "_mm512_test_epi32_mask(_mm512_load_si512(ok + (i ? i - 16 : i)), _mm512_set1_epi32(-1));"),
    ("top_k: one entry fewer sorted than the search is told",
     "std::partial_sort(buf, buf + std::min(K, SORTED0), buf + K, std::greater<float>());",
     "std::partial_sort(buf, buf + std::min(K, SORTED0) - 1, buf + K, std::greater<float>());"),
    ("row_sumexp: exp(1) for the maximum", "float y = w[i + l] == mx ? 0.0f : (w[i + l] - mx) * c;",
     "float y = w[i + l] == mx ? 1.0f : (w[i + l] - mx) * c;"),
    ("dirichlet: the acceptance test without 0.5 z^2",
     "ok[i] = int32_t(pos) & int32_t(vlog(u[i]) < 0.5f * zz * zz + d - d * v + d * lv);",
     "ok[i] = int32_t(pos) & int32_t(vlog(u[i]) < d - d * v + d * lv);"),
    ("dirichlet power step: stream 2 (the acceptance uniforms) again", "tf_block(k0, k1, uint32_t(i0 / 2), 3u, a, b);",
     "tf_block(k0, k1, uint32_t(i0 / 2), 2u, a, b);"),
    ("u01_open0: 2^-32 steps (0, 1/2]",
     "return float(int32_t(w >> 1)) * 4.656612873077393e-10f + 2.3283064365386963e-10f;",
     "return float(int32_t(w >> 1)) * 2.3283064365386963e-10f + 2.3283064365386963e-10f;"),
    ("u01_24: 23 bits, [0, 1/2)",
     "return float(int32_t(w >> 8)) * 5.9604644775390625e-08f;",
     "return float(int32_t(w >> 9)) * 5.9604644775390625e-08f;"),
    ("vlog: the m^3 coefficient 1/4 for 1/3", "y = y * m + 3.3333331174e-1f;", "y = y * m + 2.4999993993e-1f;"),
    ("vexp_neg: a coefficient ten times too large", "y = y * r + 1.3981999507e-3f;", "y = y * r + 1.3981999507e-2f;"),
    ("sincos: +sin for -sin in the second quadrant's cosine",
     "float cc = (qi == 0) ? cs : (qi == 1) ? -sn : (qi == 2) ? -cs : sn;",
     "float cc = (qi == 0) ? cs : (qi == 1) ? sn : (qi == 2) ? -cs : sn;"),
    ("cumulative: p >= 0 marks the last state", "if (p > 0.0) last = i;", "if (p >= 0.0) last = i;"),
    ("cumulative: 1 only past the last state", "for (int64_t i = 0; i < S; i++) F[i] = i >= last ? 1.0 : F[i] / sum;",
     "for (int64_t i = 0; i < S; i++) F[i] = i > last ? 1.0 : F[i] / sum;"),
    ("draw_state: the 53-bit uniform's shifts swapped",
     "const double u = (double(a[0] >> 5) * 67108864.0 + double(b[0] >> 6)) * (1.0 / 9007199254740992.0);",
     "const double u = (double(a[0] >> 6) * 67108864.0 + double(b[0] >> 5)) * (1.0 / 9007199254740992.0);"),
    ("draw_state: lower_bound", "return int32_t(std::upper_bound(F, F + S, u) - F);",
     "return int32_t(std::lower_bound(F, F + S, u) - F);"),
    ("Markov kernel rows: cached per state, not per row",
     "std::vector<double>& F = kern[i];", "std::vector<double>& F = kern[s];"),
    ("Markov state key: fold_in(node key, 0) (the draw key)", "fold_in_const(kk0, kk1, 1, sk0, sk1);",
     "fold_in_const(kk0, kk1, 0, sk0, sk1);"),
    ("Markov child state from the parent's key", "if (mk) sn = draw_state(mk->row(p.state, r), mk->S, c0[0], c1[0]);",
     "if (mk) sn = draw_state(mk->row(p.state, r), mk->S, pk0[0], pk1[0]);"),
    ("Markov handler: fixed row f == F accepted",
     'if (f < 0 || f >= fd[0]) return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: bad row");',
     'if (f < 0 || f > fd[0]) return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: bad row");'),
    ("indexed handler: an empty hash state space accepted", "if (law.child_kind == CHILD_HASH && law.n_hash == 0)",
     "if (law.child_kind == CHILD_HASH && law.n_hash < 0)"),
]  # fmt: skip
# the native kernel's tests: its own files and the native tests of the exact oracle tests (-k native selects every
# test of tests/test_native*.py by its module's name, and the two of tests/test_exact_oracle.py that name it)
NATIVE_TESTS = [
    "tests/test_native.py",
    "tests/test_native_draws.py",
    "tests/test_native_mutants.py",
    "tests/test_exact_oracle.py",
    "-k",
    "native",
]


# mistakes of the kinds the exact tests were written for, each run against the exact test file of its module
T = "tests/test_exact_{}.py".format
CLUSTERS = [
    ("logit-normal: sigma used as its square root", "brwsim/laws/_logitnormal.py",
     "scale_logits(z - jnp.max(z), self.sigma if self.scale is None else self.scale)",
     "scale_logits(z - jnp.max(z), self.sigma**0.5 if self.scale is None else self.scale**0.5)", T("laws")),
    ("Zipf: s_sd squared in the random exponent", "brwsim/laws/_zipf.py",
     "s = jnp.exp(log_s + sd * jax.random.normal(key, ()))", "s = jnp.exp(log_s + sd**2 * jax.random.normal(key, ()))",
     T("laws")),
    ("pool spine walk: last row never drawn", "brwsim/laws/_pool.py",
     "row = jax.random.randint(k1, (), 0, self.logp.shape[0])",
     "row = jax.random.randint(k1, (), 0, self.logp.shape[0] - 1)", T("laws")),
    ("pool nodes: last row never drawn", "brwsim/laws/_pool.py",
     "return jax.random.randint(key, (), 0, self.logp.shape[0])",
     "return jax.random.randint(key, (), 0, self.logp.shape[0] - 1)", T("laws")),
    ("Dirichlet spine: Beta(alpha + 1, V alpha)", "brwsim/laws/_dirichlet.py",
     "(self.V - 1) * self.alpha, ()", "self.V * self.alpha, ()", T("laws")),
    ("Z95 = 1.645", "brwsim/_stats.py", "Z95 = 1.959963984540054", "Z95 = 1.645", T("stats")),
    ("splitting: right values, not left limits", "brwsim/spine/_curves.py",
     "C, _, C2, _, _ = self._at(pos, self._lo)",
     'C, _, C2, _, _ = self._at(np.searchsorted(self._lo.v, u, side="right"), self._lo)',
     T("spine")),
    ("dual: variance without the cross term", "brwsim/spine/_curves.py",
     "var = (C2 - 2 * a * CN + a * a * N2)", "var = (C2 + a * a * N2)", T("spine")),
    ("s chosen by the estimate, not the upper value", "brwsim/spine/_curves.py",
     "i = int(np.argmin(up))", "i = int(np.argmin(est))", T("spine")),
    ("the dual bound reported as the splitting one", "brwsim/theory/_bounds.py",
     "dual=curves.dual(P, z),", "dual=curves.splitting(P, z),", T("spine")),
    ("drafter ranks by p, not q", "brwsim/drafters/_builders.py",
     "qv, idx = jax.lax.top_k(lq, K)", "qv, idx = jax.lax.top_k(lp, K)", T("drafters")),
    ("eagle: score ties to the deeper node", "brwsim/drafters/_builders.py",
     'jnp.lexsort((c["dep"], -c["score"]))', 'jnp.lexsort((-c["dep"], -c["score"]))', T("drafters")),
    ("mixture weight sign", "brwsim/drafters/_draftlaws.py",
     "weights = np.array([math.log1p(-w), np.log(w)], np.float32)",
     "weights = np.array([math.log1p(w), np.log(w)], np.float32)", T("drafters")),
    ("speculative sampling: the next depth's width ignored", "brwsim/specsampling/_rejection.py",
     "count * w[jnp.minimum(d + 1, G)]", "count * w[jnp.minimum(d, G)]", T("specsampling")),
    ("the check on the smallest P", "brwsim/estimate.py",
     "results[-1].check = sums.check.stat()", "results[0].check = sums.check.stat()", T("estimate")),
    ("planner: ties to the larger P", "brwsim/speedup/_speedup.py",
     "key=lambda r: (r.speedup, -r.P)", "key=lambda r: (r.speedup, r.P)", T("speedup")),
    ("planner: touching intervals not near-best", "brwsim/speedup/_speedup.py",
     "r.speedup + r.speedup_ci95 >= b.speedup", "r.speedup + r.speedup_ci95 > b.speedup", T("speedup")),
]  # fmt: skip

EXACT = sorted(os.path.relpath(p, SRC) for p in glob.glob(os.path.join(SRC, "tests", "test_exact_*.py")))
# module -> (files mutmut mutates, the module's own test files)
MODULES = {
    "_stats": (["brwsim/_stats.py"], ["tests/test_estimate.py"]),  # fails under mutmut's stats run
    "_moments": (["brwsim/_moments.py"], ["tests/test_laws.py"]),
    "theory": (["brwsim/theory/*"], ["tests/test_theory.py", "tests/test_bounds_property.py"]),
    "spine": (["brwsim/spine/*"], ["tests/test_spine.py", "tests/test_bounds_property.py"]),
    "spine_curves": (["brwsim/spine/_curves.py"], ["tests/test_spine.py", "tests/test_bounds_property.py"]),
    "spine_walks": (
        [f"brwsim/spine/{f}.py" for f in ("_walks", "_stationary", "_coupled", "__init__")],
        ["tests/test_spine.py", "tests/test_bounds_property.py"],
    ),
    "laws": (["brwsim/laws/*"], ["tests/test_laws.py"]),
    "drafters": (["brwsim/drafters/*"], ["tests/test_drafters.py"]),
    "specsampling": (["brwsim/specsampling/*"], ["tests/test_specsampling.py"]),
    "speedup": (["brwsim/speedup/*"], ["tests/test_speedup.py"]),
    # the oracle's Python (the native kernel's build helpers in _native.py excepted: their tests build C++)
    "oracle": (
        [f"brwsim/oracle/{f}.py" for f in ("__init__", "_batch", "_frontier", "_kernel", "_records", "_reference")]
        + ["brwsim/tree.py"],
        ["tests/test_oracle.py"],
    ),
    "estimate": (["brwsim/estimate.py"], ["tests/test_estimate.py"]),
    # the driver's parts split out of estimate.py: the memory planner, the running sums, checkpoint resume, the
    # gathering of several processes' sums
    "driver_parts": (
        [f"brwsim/{f}.py" for f in ("_memory", "_sums", "_resume", "_gather", "results", "_options")],
        ["tests/test_driver_parts.py", "tests/test_estimate.py"],
    ),
    # checkpoint files: their key (the code version, the content digests), checksum, refusals and atomic writes
    # (not tests/test_estimate.py: it fails under mutmut's stats run)
    "_checkpoint": (["brwsim/_checkpoint.py"], ["tests/test_checkpoint_integrity.py"]),
    # a worker's launcher (fork, stderr passed on, the fault's one line): its tests in-process (mutmut only runs
    # the tests whose calls reach the mutated function in the test process; test_signals.py's subprocess tests
    # run once, in the stats run); tests/test_processes.py is left out: it starts processes only
    "_supervise": (
        ["brwsim/_supervise.py"],
        ["tests/test_supervise.py", "tests/test_peer_faults.py", "tests/test_signals.py"],
    ),
    # `brwsim reproduce`: the arguments' checks, the experiments run in order, REPORT.md written or updated
    # (tests/test_experiments.py's report test runs two experiments in quick mode: about 35 s a mutant it reaches)
    "reproduce": (["brwsim/reproduce.py"], ["tests/test_reproduce_module.py", "tests/test_experiments.py"]),
    # the run over several processes (the group, the coordinator's address, the peer watch, the fault's line, the
    # collectives): its tests in-process (tests/test_processes.py starts processes only, so mutmut would run none)
    "_processes": (["brwsim/_processes.py"], ["tests/test_peer_faults.py", "tests/test_processes_mutants.py"]),
    # the `brwsim` command's parsing, tables and subcommands, called in-process (not tests/test_cli.py's
    # subprocess tests: mutmut runs only the tests whose calls reach the mutated function in the test process)
    "cli": (["brwsim/cli/*"], ["tests/test_cli_mutants.py", "tests/test_cli.py"]),
    # the real-model side: sources, drafters, measurement, speculative decoding, results (a sample: about 7,650
    # lines); every test file of tests/llm but two that read benchmarks/, tools/ and results/, which the scratch
    # copy lacks (the shipped model is loaded once per mutant by the tests that use it)
    "llm": (
        ["brwsim/llm/*"],
        sorted(
            os.path.relpath(p, SRC)
            for p in glob.glob(f"{SRC}/tests/llm/**/test_*.py", recursive=True)
            if os.path.basename(p) not in ("test_gpu_check.py", "test_heldout.py")
        ),
    ),
}


BEFORE = {  # exact test file -> the tests that covered its module before the exact tests
    T("laws"): ["tests/test_laws.py"],
    T("stats"): ["tests/test_estimate.py"],
    T("spine"): ["tests/test_spine.py", "tests/test_theory.py"],
    T("drafters"): ["tests/test_drafters.py"],
    T("specsampling"): ["tests/test_specsampling.py"],
    T("estimate"): ["tests/test_estimate.py"],
    T("speedup"): ["tests/test_speedup.py"],
}


def _toml_list(xs) -> str:
    return "[" + ", ".join(f'"{x}"' for x in xs) + "]"


def _scratch(module: str, before: bool) -> str:
    return os.path.join(tempfile.gettempdir(), f"brwsim-mutmut-{module}{'-before' if before else ''}")


NO_MUTANT = "brwsim.no_such_module.x_none__mutmut_0"  # a name no mutant has: `mutmut run` generates, collects, stops
NOT_KILLED = (0, 2, 5, 33, 36, 24, -24, 152, 255)  # mutmut's exit codes: survived, interrupted, no tests, timeout


def recheck_mutmut(
    module: str, sample: int | None = None, seed: int = 0, unlisted: bool = False, before: bool = False
) -> int:
    """Re-run the survivors, timeouts and mutants no test reached of an earlier ``mutmut MODULE`` with today's tests
    (the mutants that run never got to stay unchecked); ``unlisted``: only those docs/mutants.md does not list as
    equivalent (the ones new tests were written for).

    ``sample``: instead, run a uniform random sample (``seed``) of that many of the mutants never checked (the
    rest stay unchecked, earlier results stand); the names go to ``sample.txt`` in the scratch copy.
    ``before``: the scratch copy of ``mutmut MODULE --before`` (the module's own test files) instead.
    """
    dst = _scratch(module, before)
    if sample is not None and not os.path.isdir(os.path.join(dst, "mutants")):  # no run yet: mutants and stats only
        dst, _ = _make_scratch(module, before)
        _mutmut_in(dst, module, [], time.time(), names=[NO_MUTANT])  # (mutmut then refuses the name: nothing runs)
    _sync(dst)
    tests = MODULES[module][1] if before else EXACT
    for t in tests:  # (an exact test file newer than the scratch copy is copied but not selected)
        data = glob.glob(os.path.join(SRC, t[: -len(".py")] + "_*.txt"))  # a test file's expected outputs
        for d in (dst, os.path.join(dst, "mutants")):
            for f in [os.path.join(SRC, t), *data]:
                shutil.copy(f, os.path.join(d, os.path.relpath(f, SRC)))
    rerun, unchecked = [], []
    equivalent = _listed("Equivalent") if unlisted else {}
    for meta in glob.glob(os.path.join(dst, "mutants", "**", "*.meta"), recursive=True):
        data = json.load(open(meta))
        codes = data["exit_code_by_key"]
        for k, v in codes.items():
            if v is None:
                unchecked.append(k)
            elif v in NOT_KILLED and sample is None and not _in(equivalent, k):
                rerun.append(k)
                codes[k] = None
        json.dump(data, open(meta, "w"), indent=4)
    if sample is not None:
        picked = sorted(random.Random(seed).sample(sorted(unchecked), min(sample, len(unchecked))))
        with open(os.path.join(dst, "sample.txt"), "a") as f:
            f.writelines(n + "\n" for n in picked)
        names = picked
        print(f"{module}: {len(picked)} of {len(unchecked)} unchecked mutants, drawn with seed {seed}")
    else:  # the mutants not checked yet stay so (a plain `mutmut run` in the scratch copy goes on with them)
        names = sorted(rerun)
        print(f"{module}: {len(rerun)} survivors, timeouts and mutants no test reached, again")
    if not names:
        return 0
    return _mutmut_in(dst, module, tests, time.time(), names)


MUTANTS_DOC = os.path.join(SRC, "docs", "mutants.md")


def _listed(section: str) -> dict:
    """(owner or None, function) -> mutant numbers, from the lines of one top-level section of docs/mutants.md
    ("Equivalent", "Killed", "Obsolete"): ``- [module.][Class.]function N, M (what): reason``."""
    out: dict = {}
    current = None
    for line in open(MUTANTS_DOC):
        if line.startswith("# "):
            current = line[2:].split()[0]
            continue
        line = line.strip()
        if current != section or not line.startswith("- "):
            continue
        head = re.sub(r"`[^`]*`", "", line[2:].split(": ", 1)[0])
        while re.search(r"\([^()]*\)", head):  # the "(what)" parts, nested parentheses included
            head = re.sub(r"\([^()]*\)", "", head)
        for ident, nums in re.findall(r"([A-Za-z_][\w.]*)\s+((?:\d+\s*(?:,\s*|and\s+)?)+)", head):
            parts = ident.split(".")
            key = (parts[-2] if len(parts) > 1 else None, parts[-1])
            out.setdefault(key, set()).update(int(x) for x in re.findall(r"\d+", nums))
    return out


def _in(listed: dict, name: str) -> bool:
    """Whether mutmut's mutant ``name`` (``brwsim.mod.x_func__mutmut_N``, ``...xǁClassǁmethod__mutmut_N``) is listed."""
    base, n = name.rsplit("__mutmut_", 1)
    mod, last = base.split(".")[-2:]
    cls, fn = last.split("ǁ")[1:] if last.startswith("xǁ") else (None, last[2:])
    return any(f == fn and int(n) in nums and o in (None, cls, mod, mod.lstrip("_")) for (o, f), nums in listed.items())


def mutmut_counts(module: str, before: bool = False) -> str:
    """One row of docs/testing.md's table from a scratch copy: the mutants run in full, a random sample of the rest
    (``sample.txt``), survivors listed in docs/mutants.md as equivalent / killed later (by hand) / obsolete; the
    whole-module score as a ratio estimate with the sample's Clopper-Pearson 95% interval."""
    from scipy.stats import beta

    dst = _scratch(module, before)
    codes: dict = {}
    for meta in glob.glob(os.path.join(dst, "mutants", "**", "*.meta"), recursive=True):
        codes.update(json.load(open(meta))["exit_code_by_key"])
    path = os.path.join(dst, "sample.txt")
    sample = set(open(path).read().split()) if os.path.exists(path) else set()
    equivalent, killed, obsolete = _listed("Equivalent"), _listed("Killed"), _listed("Obsolete")
    strata: dict = {"full": {}, "sample": {}}
    for k, v in codes.items():
        timeout = v in (36, 24, -24, 152, 255)
        s = "unchecked" if v is None else "killed" if v == 1 else "timeout" if timeout else "survived"
        if s in ("survived", "timeout"):
            if _in(obsolete, k):
                continue
            s = "equivalent" if _in(equivalent, k) else "killed" if _in(killed, k) else s
        d = strata["sample" if k in sample and s != "unchecked" else "full"]
        d[s] = d.get(s, 0) + 1
    F, S = strata["full"], strata["sample"]

    def g(d, k):
        return d.get(k, 0)

    def nonequivalent(d):
        return g(d, "killed") + g(d, "survived") + g(d, "timeout")

    n, not_run = sum(S.values()), g(F, "unchecked")
    kc, nc, ks, ns = g(F, "killed"), nonequivalent(F), g(S, "killed"), nonequivalent(S)
    ratio = "-"
    if n and ns:
        lo = beta.ppf(0.025, ks, ns - ks + 1) if ks else 0.0
        hi = beta.ppf(0.975, ks + 1, ns - ks) if ks < ns else 1.0
        m = (not_run + n) * ns / n  # non-equivalent mutants expected among those not run in full

        def est(r):
            return 100 * (kc + m * r) / (nc + m)

        ratio = f"{est(ks / ns):.1f}% [{est(lo):.1f}, {est(hi):.1f}]"
    cells = "killed survived timeout equivalent".split()
    return (
        f"| `{module}` | {len(codes)} | {' / '.join(str(g(F, c)) for c in cells)} | {not_run} | "
        + (f"{n}: {' / '.join(str(g(S, c)) for c in cells)}" if n else "-")
        + f" | {kc + ks} / {nc + ns} = {100 * (kc + ks) / max(nc + ns, 1):.1f}% | {ratio} |"
    )


def _sync(dst: str) -> None:
    """Bring a scratch copy's source up to today's: each file that differs is copied (a newer mtime), so that
    mutmut regenerates that file's mutants and forgets the results of exactly the functions whose text changed
    (it keeps a hash per function); files that are the same keep their mtime and their results."""
    for d in ("brwsim", "examples"):
        for src in glob.glob(os.path.join(SRC, d, "**", "*"), recursive=True):
            if os.path.isdir(src) or "__pycache__" in src or src.endswith(".so"):
                continue
            rel = os.path.relpath(src, SRC)
            old = os.path.join(dst, rel)
            if not os.path.exists(old) or open(src, "rb").read() != open(old, "rb").read():
                os.makedirs(os.path.dirname(old), exist_ok=True)
                shutil.copyfile(src, old)
    # The test selection stays as it was: mutmut forgets every result when the selection changes (a new exact
    # test file). The selection's files are copied in again, new tests and all, by the caller.


def run_mutmut(module: str, before: bool) -> int:
    """mutmut on one module in a scratch copy; prints the counts (killed, survived, ...)."""
    dst, tests = _make_scratch(module, before)
    return _mutmut_in(dst, module + (" (before)" if before else ""), tests, time.time())


def _make_scratch(module: str, before: bool) -> tuple[str, list]:
    """A fresh scratch copy for one module: (its directory, the test files selected)."""
    files, tests = MODULES[module]
    tests = tests if before else EXACT
    tests = [t for t in tests if os.path.exists(os.path.join(SRC, t))]
    dst = _scratch(module, before)
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for d in ("brwsim", "tests", "examples"):  # (tests read examples/ by relative path)
        shutil.copytree(os.path.join(SRC, d), os.path.join(dst, d), ignore=shutil.ignore_patterns("__pycache__"))
    text = open(os.path.join(SRC, "pyproject.toml")).read()
    text = re.sub(r"only_mutate = \[[^\]]*\]", f"only_mutate = {_toml_list(files)}", text)
    text = re.sub(
        r"pytest_add_cli_args_test_selection = \[[^\]]*\]",
        f"pytest_add_cli_args_test_selection = {_toml_list(tests)}",
        text,
    )
    open(os.path.join(dst, "pyproject.toml"), "w").write(text)
    return dst, tests


FULL_RUN = [
    "_stats",
    "_moments",
    "theory",
    "spine_curves",
    "spine_walks",
    "specsampling",
    "estimate",
    "laws",
    "drafters",
    "oracle",
    "speedup",
]  # every core file once (spine = spine_curves + spine_walks)


def mutmut_all(modules, children: int) -> int:
    """The full run over the core: each module's scratch copy made once (with the exact tests) and then only
    continued, so a run that was stopped goes on where it stopped: its source is first brought up to date
    (:func:`_sync`: only the changed functions' results are forgotten) and mutmut runs every mutant not yet
    checked. ``children`` mutants at a time, under ``nice -n 19``."""
    for module in modules or FULL_RUN:
        dst = _scratch(module, False)
        if not os.path.isdir(os.path.join(dst, "mutants")):
            _make_scratch(module, False)
        else:
            _sync(dst)
        _mutmut_in(dst, module, EXACT, time.time(), children=children)
        print(mutmut_counts(module), flush=True)
    return 0


def _mutmut_in(dst: str, what: str, tests, t0: float, names=None, children: int = 1) -> int:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # mutants/ must be the brwsim imported
    env["JAX_PLATFORMS"] = "cpu"
    mutmut = [sys.executable, "-m", "mutmut"]
    run = ["nice", "-n", "19", *mutmut, "run", "--max-children", str(children), *(names or [])]
    subprocess.run(run, cwd=dst, env=env)
    out = subprocess.run([*mutmut, "results", "--all", "true"], cwd=dst, env=env, capture_output=True, text=True)
    counts: dict[str, int] = {}
    for line in out.stdout.splitlines():
        if ": " in line:
            status = line.rsplit(": ", 1)[1].strip()
            counts[status] = counts.get(status, 0) + 1
    print(f"{what}: {counts} in {time.time() - t0:.0f} s; tests {tests}; dir {dst}")
    return 0


def main() -> int:
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if sys.argv[1:2] == ["mutmut-recheck"]:
        return recheck_mutmut(sys.argv[2], unlisted="--unlisted" in sys.argv[3:], before="--before" in sys.argv[3:])
    before = "--before" in sys.argv[2:]
    args = [a for a in sys.argv[2:] if a != "--before"]
    if sys.argv[1:2] == ["mutmut-counts"]:  # [--before] [MODULE...]
        for m in args or [m for m in MODULES if os.path.isdir(_scratch(m, before))]:
            print(mutmut_counts(m, before))
        return 0
    if sys.argv[1:2] == ["mutmut-sample"]:  # MODULE N [SEED] [--before]
        return recheck_mutmut(args[0], int(args[1]), int(args[2]) if args[2:] else 0, before=before)
    if sys.argv[1:2] == ["mutmut-all"]:  # [--children N] [MODULE...]
        args, children = sys.argv[2:], 1
        if args[:1] == ["--children"]:
            children, args = int(args[1]), args[2:]
        return mutmut_all(args, children)
    if sys.argv[1:2] == ["mutmut"]:
        return run_mutmut(sys.argv[2], "--before" in sys.argv[3:])
    if sys.argv[1:2] == ["native"]:  # [NAME...]: only the mutants whose name contains one of them
        picked = [m for m in NATIVE_MUTATIONS if not sys.argv[2:] or any(a in m[0] for a in sys.argv[2:])]
        return run_native(picked)
    if sys.argv[1:2] == ["clusters"]:  # --before: against the module's own tests instead of its exact tests
        before = "--before" in sys.argv[2:]
        return run_mutations([(n, p, o, m, BEFORE[t] if before else [t]) for n, p, o, m, t in CLUSTERS])
    tests = sys.argv[1:] or [
        "tests/test_theory.py",
        "tests/test_bounds_property.py",
        "tests/test_spine.py",
        "tests/test_laws.py",
        "tests/test_estimate.py",
    ]
    return run_mutations([(n, p, o, m, tests) for n, p, o, m in MUTATIONS])


def run_mutations(mutations) -> int:
    """Apply each (name, file, old line, new line, tests) in turn in a scratch worktree; RED when a test fails."""
    shutil.rmtree(DST, ignore_errors=True)
    subprocess.run(
        ["git", "-C", SRC, "worktree", "add", "-f", "--detach", DST, "HEAD"], check=True, capture_output=True
    )
    for t in {t for m in mutations for t in m[4]}:  # the tests as they are in the working tree
        if os.path.exists(os.path.join(SRC, t)):
            shutil.copy(os.path.join(SRC, t), os.path.join(DST, t))
    env = dict(os.environ, PYTHONPATH=DST)
    survivors = 0
    for name, path, old, new, tests in mutations:
        f = os.path.join(DST, path)
        text = open(f).read()
        assert text.count(old) == 1, (name, text.count(old))
        open(f, "w").write(text.replace(old, new))
        t0 = time.time()
        p = subprocess.run(
            [
                "nice",
                "-n",
                "15",
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-x",
                "-n",
                "0",
                "-p",
                "no:cacheprovider",
                *tests,
            ],
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


_BUILD = """
import os, sys
import brwsim
from brwsim.oracle import _native
where = os.path.realpath(os.path.dirname(brwsim.__file__))
assert where == os.path.realpath(os.path.join(sys.argv[1], "brwsim")), f"brwsim imported from {where}"
ok = _native.available()
print(_native.library_path(_native.compiler()) if ok else "-")
sys.exit(0 if ok else 3)
"""


def run_native(mutations) -> int:
    """Each (name, old line, new line) of the C++ kernel in a scratch worktree of HEAD: the library built from the
    mutated source (BUILD when it does not build), then ``NATIVE_TESTS`` (``-x``): RED when a test fails."""
    shutil.rmtree(DST, ignore_errors=True)
    subprocess.run(
        ["git", "-C", SRC, "worktree", "add", "-f", "--detach", DST, "HEAD"], check=True, capture_output=True
    )
    for t in NATIVE_TESTS:  # the tests as they are in the working tree
        if t.endswith(".py") and os.path.exists(os.path.join(SRC, t)):
            shutil.copy(os.path.join(SRC, t), os.path.join(DST, t))
    tests = [t for t in NATIVE_TESTS if not t.endswith(".py") or os.path.exists(os.path.join(DST, t))]
    cache = os.path.join(tempfile.gettempdir(), "brwsim-native-mutants-cache")  # XLA's programs kept between mutants
    env = dict(os.environ, PYTHONPATH=DST, BRWSIM_CACHE=cache, BRWSIM_REQUIRE_NATIVE="1", JAX_PLATFORMS="cpu")
    pytest = [sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", "-p", "no:cacheprovider", *tests]

    def build() -> tuple[bool, str]:
        p = subprocess.run([sys.executable, "-c", _BUILD, DST], cwd=DST, env=env, capture_output=True, text=True)
        if p.returncode not in (0, 3):
            sys.exit(f"the build check failed: {p.stderr.strip()[-2000:]}")
        return p.returncode == 0, (p.stdout.strip() or "-") if p.returncode == 0 else p.stderr.strip()[-300:]

    f = os.path.join(DST, NATIVE)
    text = open(f).read()
    for name, old, _ in mutations:
        assert text.count(old) == 1, (name, text.count(old))
    t0 = time.time()
    built, base = build()
    p = subprocess.run(pytest, cwd=DST, env=env, capture_output=True, text=True)
    if not built or p.returncode:
        sys.exit(f"the unmutated source: built {built}, tests rc {p.returncode}\n{p.stdout[-3000:]}")
    print(f"unmutated: built {os.path.basename(base)}, {p.stdout.strip().splitlines()[-1]} ({time.time() - t0:.0f} s)")
    result: dict[str, list] = {"RED": [], "GREEN": [], "BUILD": []}
    for name, old, new in mutations:
        open(f, "w").write(text.replace(old, new))
        t0 = time.time()
        built, so = build()
        if built and so == base:
            sys.exit(f"{name}: the library was not built again from the mutated source")
        p = subprocess.run(pytest, cwd=DST, env=env, capture_output=True, text=True)
        if not built:
            if p.returncode == 0:
                sys.exit(f"{name}: the library did not build, yet the tests passed")
            status = "BUILD"
        else:
            status = "RED" if p.returncode else "GREEN"
        result[status].append(name)
        failed = [ln for ln in p.stdout.splitlines() if ln.startswith("FAILED")]
        why = so if status == "BUILD" else failed[:1]
        print(f"{status:5} {name}: {why} ({time.time() - t0:.0f} s)", flush=True)
        if built and os.path.exists(so):
            os.remove(so)  # (a mutant's library is never wanted again)
    open(f, "w").write(text)
    subprocess.run(["git", "-C", SRC, "worktree", "remove", "--force", DST], capture_output=True)
    n = len(mutations)
    killed, survived, failed = (len(result[k]) for k in ("RED", "GREEN", "BUILD"))
    print(f"{n} mutants: {killed} killed, {survived} survived, {failed} did not build")
    for name in result["GREEN"]:
        print(f"  survived: {name}")
    return 1 if result["GREEN"] else 0


if __name__ == "__main__":
    sys.exit(main())
