// brwsim's native CPU oracle: the best-first search of brwsim.oracle, one XLA FFI custom call.
//
// Built on first use by brwsim/oracle/_native.py (c++ -O3 -march=native, into the user cache) and
// called from the jitted program with jax.ffi.ffi_call. It builds exactly the trees of the JAX
// kernel (brwsim/oracle/_kernel.py) for indexed laws: the same node keys (threefry2x32 fold_in,
// split and random_bits as JAX computes them with jax_threefry_partitionable), the same rows and
// hidden states, the same float32 path sums (parent log P + entry of the parent's row), and the
// same tie-break (the lowest frontier slot, i.e. the earliest-taken parent).
//
// Layout: LANES trees are searched in lock step, each with its own frontier (a binary max-heap of
// 64-bit keys: the order-preserving bits of the candidate's float32 value above the complement of
// its slot, so one integer compare gives "larger value, then smaller slot") and its node records
// (32 bytes a slot). The per-lane heap work is independent between lanes, so the core overlaps
// the lanes' dependent loads; the threefry rounds of all lanes run as one vectorisable loop.
#include <algorithm>
#include <cmath>
#ifdef __AVX2__
#include <immintrin.h>
#endif
#include <cstdint>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

#ifndef NLANES
#define NLANES 8
#endif
constexpr int LANES = NLANES;

// -- threefry2x32, 20 rounds, as jax._src.random.threefry2x32 ------------------------------

static inline uint32_t rotl(uint32_t x, int d) { return (x << d) | (x >> (32 - d)); }

// threefry2x32 of the count words (x0, x1) under key (k0, k1), for LANES lanes at once.
static inline void threefry(const uint32_t* k0, const uint32_t* k1, const uint32_t* c0, const uint32_t* c1,
                            uint32_t* o0, uint32_t* o1) {
  static const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  for (int l = 0; l < LANES; l++) {
    uint32_t ks[3] = {k0[l], k1[l], k0[l] ^ k1[l] ^ 0x1BD11BDAu};
    uint32_t x0 = c0[l] + ks[0], x1 = c1[l] + ks[1];
    for (int i = 0; i < 5; i++) {
      for (int j = 0; j < 4; j++) {
        x0 += x1;
        x1 = rotl(x1, rot[i & 1][j]) ^ x0;
      }
      x0 += ks[(i + 1) % 3];
      x1 += ks[(i + 2) % 3] + uint32_t(i + 1);
    }
    o0[l] = x0;
    o1[l] = x1;
  }
}

#ifdef __AVX2__
template <int D>
static inline __m256i rotl8(__m256i x) {
  return _mm256_or_si256(_mm256_slli_epi32(x, D), _mm256_srli_epi32(x, 32 - D));
}

// fold_in of 16 keys held in two pairs of AVX2 vectors (a: lanes 0-7, b: lanes 8-15) with data (da, db):
// threefry2x32 of (0, data), its two round chains interleaved (bit for bit the scalar threefry's).
static inline void fold_in16(__m256i ka0, __m256i ka1, __m256i kb0, __m256i kb1, __m256i da, __m256i db,
                             __m256i* oa0, __m256i* oa1, __m256i* ob0, __m256i* ob1) {
  const __m256i c = _mm256_set1_epi32(int(0x1BD11BDAu));
  const __m256i ka2 = _mm256_xor_si256(_mm256_xor_si256(ka0, ka1), c);
  const __m256i kb2 = _mm256_xor_si256(_mm256_xor_si256(kb0, kb1), c);
  __m256i a0 = ka0, b0 = kb0;  // count word 0 is 0
  __m256i a1 = _mm256_add_epi32(da, ka1), b1 = _mm256_add_epi32(db, kb1);
#define TF_ROUND(D)                        \
  a0 = _mm256_add_epi32(a0, a1);           \
  b0 = _mm256_add_epi32(b0, b1);           \
  a1 = _mm256_xor_si256(rotl8<D>(a1), a0); \
  b1 = _mm256_xor_si256(rotl8<D>(b1), b0);
#define TF_INJECT(I, K0, K1, L0, L1)                                        \
  a0 = _mm256_add_epi32(a0, K0);                                          \
  b0 = _mm256_add_epi32(b0, L0);                                          \
  a1 = _mm256_add_epi32(a1, _mm256_add_epi32(K1, _mm256_set1_epi32(I))); \
  b1 = _mm256_add_epi32(b1, _mm256_add_epi32(L1, _mm256_set1_epi32(I)));
  TF_ROUND(13) TF_ROUND(15) TF_ROUND(26) TF_ROUND(6) TF_INJECT(1, ka1, ka2, kb1, kb2)
  TF_ROUND(17) TF_ROUND(29) TF_ROUND(16) TF_ROUND(24) TF_INJECT(2, ka2, ka0, kb2, kb0)
  TF_ROUND(13) TF_ROUND(15) TF_ROUND(26) TF_ROUND(6) TF_INJECT(3, ka0, ka1, kb0, kb1)
  TF_ROUND(17) TF_ROUND(29) TF_ROUND(16) TF_ROUND(24) TF_INJECT(4, ka1, ka2, kb1, kb2)
  TF_ROUND(13) TF_ROUND(15) TF_ROUND(26) TF_ROUND(6) TF_INJECT(5, ka2, ka0, kb2, kb0)
#undef TF_ROUND
#undef TF_INJECT
  *oa0 = a0;
  *oa1 = a1;
  *ob0 = b0;
  *ob1 = b1;
}
#endif

// fold_in(k, data): threefry(k, (0, data)).
static inline void fold_in(const uint32_t* k0, const uint32_t* k1, const uint32_t* data, uint32_t* o0,
                           uint32_t* o1) {
  uint32_t zero[LANES] = {0};
  threefry(k0, k1, zero, data, o0, o1);
}

static inline void fold_in_const(const uint32_t* k0, const uint32_t* k1, uint32_t d, uint32_t* o0, uint32_t* o1) {
  uint32_t data[LANES];
  for (int l = 0; l < LANES; l++) data[l] = d;
  fold_in(k0, k1, data, o0, o1);
}

// jax.random.randint(key, (), 0, n) for int32: split (fold-like), 32 random bits from each half,
// combined modulo n as JAX does (uint32 arithmetic, wrapping).
static inline void randint(const uint32_t* k0, const uint32_t* k1, uint32_t n, int32_t* out) {
  uint32_t a0[LANES], a1[LANES], b0[LANES], b1[LANES], h0[LANES], h1[LANES], g0[LANES], g1[LANES];
  fold_in_const(k0, k1, 0, a0, a1);  // split(key)[0] = threefry(key, (0, 0))
  fold_in_const(k0, k1, 1, b0, b1);  // split(key)[1] = threefry(key, (0, 1))
  fold_in_const(a0, a1, 0, h0, h1);  // random_bits(k, 32, ()) = xor of threefry(k, (0, 0))
  fold_in_const(b0, b1, 0, g0, g1);
  uint32_t span = n == 0 ? 1u : n;
  uint32_t mult = 65536u % span;
  mult = (mult * mult) % span;
  for (int l = 0; l < LANES; l++) {
    uint32_t hi = h0[l] ^ h1[l], lo = g0[l] ^ g1[l];
    uint32_t off = (hi % span) * mult + (lo % span);
    out[l] = int32_t(off % span);
  }
}

// -- the laws served: how a node's hidden state and row arise ------------------------------

enum InitKind { INIT_ZERO = 0, INIT_RANDINT = 1 };
enum ChildKind { CHILD_ZERO = 0, CHILD_HASH = 1 };
enum RowKind { ROW_ZERO = 0, ROW_STATE = 1, ROW_RANDINT = 2 };

struct Law {
  const float* table;  // [n_rows, K], each row sorted decreasing
  int64_t K;
  int32_t init_kind, child_kind, row_kind;
  uint32_t n_init, n_hash, n_rows;
};

// a % d for 32-bit a and a fixed d >= 1, exact, without a division (Lemire, Kaser and Kurz 2019).
struct FastMod {
  uint64_t M;
  uint32_t d;
  explicit FastMod(uint32_t d_) : M(~uint64_t(0) / (d_ ? d_ : 1) + 1), d(d_ ? d_ : 1) {}
  inline uint32_t operator()(uint32_t a) const {
    return uint32_t((static_cast<unsigned __int128>(M * a) * d) >> 64);
  }
};

// brwsim.testing.TableLaw.child_state: a 32-bit hash of the parent's state and the rank.
static inline int32_t hash_state(uint32_t s, uint32_t rank, const FastMod& mod) {
  uint32_t h = s * 0x9E3779B1u + rank * 0x85EBCA77u + 0x165667B1u;
  h ^= h >> 15;
  h *= 0xC2B2AE3Du;
  h ^= h >> 13;
  return int32_t(mod(h));
}

// Rows of LANES nodes with keys (k0, k1) and states s (the law's node_row on dist_key(k)).
static inline void node_rows(const Law& law, const uint32_t* k0, const uint32_t* k1, const int32_t* s,
                             int32_t* row) {
  if (law.row_kind == ROW_RANDINT) {
    uint32_t d0[LANES], d1[LANES];
    fold_in_const(k0, k1, 0, d0, d1);
    randint(d0, d1, law.n_rows, row);
  } else if (law.row_kind == ROW_STATE) {
    for (int l = 0; l < LANES; l++) row[l] = s[l];
  } else {
    for (int l = 0; l < LANES; l++) row[l] = 0;
  }
}

// -- one tree's frontier and records ------------------------------------------------------

struct alignas(32) Rec {
  float lp;
  int32_t row, ptr, state, depth;
  uint32_t k0, k1;
  int32_t held;  // a drawn law's row: how many entries are drawn (unused elsewhere)
};

static inline uint64_t order_key(float v, uint32_t slot) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7fffffffu) == 0) u = 0;  // -0.0 == +0.0
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (uint64_t(u) << 32) | uint64_t(~slot);
}

static inline float value_of(uint64_t key) {
  uint32_t u = uint32_t(key >> 32);
  u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

static inline uint32_t slot_of(uint64_t key) { return ~uint32_t(key); }

struct Heap {
  uint64_t* h;  // h[1..n]: a max-heap (1-based)
  int64_t n;

  // Place x at hole i, moving it up past smaller parents.
  inline void sift_up(int64_t i, uint64_t x) {
    while (i > 1) {
      uint64_t p = h[i >> 1];
      if (p >= x) break;
      h[i] = p;
      i >>= 1;
    }
    h[i] = x;
  }

  inline void push(uint64_t x) { sift_up(++n, x); }

  // Replace the top by x and restore the heap: the hole goes down along the larger children to a
  // leaf (no compare with x on the way), then x rises from there (usually a step or two).
  inline void replace_top(uint64_t x) {
    int64_t i = 1, m = n;
    for (;;) {
      int64_t c = 2 * i;
      if (c + 1 <= m) {
        c += h[c + 1] > h[c];
      } else if (c > m) {
        break;
      }
      h[i] = h[c];
      i = c;
    }
    sift_up(i, x);
  }

  inline void pop() {
    uint64_t last = h[n--];
    if (n > 0) replace_top(last);
  }
};

struct Out {
  int32_t *parent, *depth, *rank, *state;
  float* logp;
  uint32_t* key;  // [B, P, 2]
};



// -- laws whose search needs no node key (fixed, the table law): keys in a vectorised pass after ---

struct alignas(16) Rec16 {
  float lp;
  int32_t row, ptr, depth;
};

// Two frontiers, chosen by the number of slots S = P + 1 (measured, benchmarks/README.md):
//  * Flat (S <= FLAT_MAX): every candidate in plain arrays, the top found by a pass over them. For
//    the keyless laws the candidates of sixteen trees are interleaved slot by slot (search_lanes:
//    one vector compare per slot serves eight of them); for pool, each tree's candidates in a few AVX2
//    vectors (FlatFrontier: their maximum and the first slot holding it, no branch).
//  * Heap: a binary max-heap of 64-bit keys (order_key: value, then the lower slot first).
// All take the lowest slot among equal candidates, the earliest-taken parent (the reference
// tie-break), and slot 0 when every candidate is -inf, as the JAX kernel does.

#ifndef FLATMAX
#define FLATMAX 136
#endif
constexpr int64_t FLAT_MAX = FLATMAX;

struct FlatFrontier {
  float* v;  // [nv * 8], 32-byte aligned, -inf where empty
  int64_t nv;
  void init(float* buf, int64_t S) {
    v = buf;
    nv = (S + 7) / 8;
    for (int64_t i = 0; i < nv * 8; i++) v[i] = -INFINITY;
  }
#ifdef __AVX2__
  // the largest candidate and its first slot
  inline int64_t top(float* m) const {
    __m256 mx = _mm256_load_ps(v);
    for (int64_t i = 1; i < nv; i++) mx = _mm256_max_ps(mx, _mm256_load_ps(v + 8 * i));
    mx = _mm256_max_ps(mx, _mm256_permute2f128_ps(mx, mx, 1));
    mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, _MM_SHUFFLE(1, 0, 3, 2)));
    mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, _MM_SHUFFLE(2, 3, 0, 1)));
    *m = _mm256_cvtss_f32(mx);
    for (int64_t i = 0;; i++) {
      unsigned mask = unsigned(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_load_ps(v + 8 * i), mx, _CMP_EQ_OQ)));
      if (mask) return 8 * i + __builtin_ctz(mask);
    }
  }
  // slot s := x, as a whole-vector store (a scalar store then a vector load would stall forwarding)
  inline void set(int64_t s, float x) {
    float* base = v + (s & ~int64_t(7));
    __m256i lane = _mm256_set1_epi32(int(s & 7));
    __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 sel = _mm256_castsi256_ps(_mm256_cmpeq_epi32(lane, iota));
    _mm256_store_ps(base, _mm256_blendv_ps(_mm256_load_ps(base), _mm256_set1_ps(x), sel));
  }
#else
  inline int64_t top(float* m) const {
    int64_t b = 0;
    for (int64_t i = 1; i < nv * 8; i++)
      if (v[i] > v[b]) b = i;
    *m = v[b];
    return b;
  }
  inline void set(int64_t s, float x) { v[s] = x; }
#endif
};

#ifndef FLATB
#define FLATB 2
#endif
// vectors of eight trees the flat search takes together (measured: two run more compare chains
// and lane work side by side than one)
constexpr int FLAT_BLOCKS = FLATB;

#ifndef GHEAP
#define GHEAP 1
#endif
// heap trees a core searches in lock step (measured: interleaving them gains nothing, their
// branches dominate)
constexpr int GROUP_HEAP = GHEAP;

// The search of G trees whose roots have rows `row0` (= the state for the table law), each with a heap
// frontier: writes parent, depth, log P, rank and state of their P nodes (output offsets `o`).
// `first[row]`: the row's largest entry. HASHED: child states by hash_state (the table law), else 0.
// Buffers: `rec`, `hbuf` per tree. (Flat P: search_lanes, below.)
template <int G, bool HASHED>
static void search_keyless(const Law& law, const float* first, const int32_t* row0, int64_t P, Rec16* const* rec,
                           uint64_t* const* hbuf, const int64_t* o, const Out& out) {
  const int64_t K = law.K;
  const float* tab = law.table;
  const FastMod mod(law.n_hash);
  int32_t* __restrict o_parent = out.parent;
  int32_t* __restrict o_depth = out.depth;
  int32_t* __restrict o_rank = out.rank;
  int32_t* __restrict o_state = out.state;
  float* __restrict o_logp = out.logp;
  Heap hp[G];
  Rec16* rg[G];
  int32_t* po[G];  // parent outputs of each tree, offset so that node n is at po[g][n]
  for (int g = 0; g < G; g++) {
    rg[g] = rec[g];
    po[g] = o_parent + o[g] - 1;
    hp[g] = Heap{hbuf[g], 0};
    rg[g][0] = Rec16{0.0f, row0[g], 0, 0};
    if (first[row0[g]] != -INFINITY) {
      hp[g].push(order_key(first[row0[g]], 0));
    }
  }
  for (int64_t n = 1; n <= P; n++) {
    for (int g = 0; g < G; g++) {
      int64_t j = 0;
      float m = -INFINITY;
      if (hp[g].n > 0) {
        uint64_t top = hp[g].h[1];
        j = slot_of(top);
        m = value_of(top);
      }
      Rec16& p = rg[g][j];
      int32_t r = p.ptr;
      p.ptr = r + 1;
      float nxt = (r + 1 < K) ? tab[int64_t(p.row) * K + r + 1] : -INFINITY;
      float cand = p.lp + nxt;  // the parent's next child replaces it
      int32_t row = HASHED ? hash_state(uint32_t(p.row), uint32_t(r), mod) : 0;
      float c = m + first[row];  // the new node's best child enters at slot n
      __builtin_prefetch(tab + int64_t(row) * K + 1);  // read when the new node is next taken from
      int32_t depth = p.depth + 1;
      rg[g][n] = Rec16{m, row, 0, depth};
      if (hp[g].n > 0) {
        if (cand != -INFINITY)
          hp[g].replace_top(order_key(cand, uint32_t(j)));
        else
          hp[g].pop();
      }
      if (c != -INFINITY) hp[g].push(order_key(c, uint32_t(n)));
      int64_t i = o[g] + n - 1;
      po[g][n] = int32_t(j) - 1;
      o_depth[i] = depth;
      o_logp[i] = m;
      o_rank[i] = r;
      o_state[i] = row;
    }
  }
}

// -- laws whose rows come from the node key (pool): LANES trees in lock step, keys in the search --

// Search LANES trees t0 .. t0 + LANES - 1 (lanes past n_active compute a copy of lane 0, not written):
// the heap or flat frontier per lane, the new nodes' keys and rows for all lanes at once (threefry
// vectorised over the lanes).
template <bool FLAT>
static void search_keyed(const Law& law, const float* first, const uint32_t* tree_keys, int64_t t0, int n_active,
                         int64_t P, Rec* recs, float* fbufs, int64_t fstride, uint64_t* heaps, const Out& out) {
  const int64_t S = P + 1, K = law.K;
  const float* tab = law.table;
  Rec* rec[LANES];
  Heap heap[LANES];
  FlatFrontier f[LANES];
  uint32_t k0[LANES], k1[LANES];
  int32_t st[LANES], row[LANES];
  for (int l = 0; l < LANES; l++) {
    int64_t t = t0 + (l < n_active ? l : 0);
    k0[l] = tree_keys[2 * t];
    k1[l] = tree_keys[2 * t + 1];
    st[l] = 0;
    rec[l] = recs + l * S;
    heap[l] = Heap{heaps + l * (S + 1), 0};
  }
  node_rows(law, k0, k1, st, row);
  for (int l = 0; l < LANES; l++) {
    rec[l][0] = Rec{0.0f, row[l], 0, 0, 0, k0[l], k1[l], 0};
    float c = first[row[l]];
    if (FLAT) {
      f[l].init(fbufs + l * fstride, S);
      f[l].set(0, c);
    } else if (c != -INFINITY) {
      heap[l].push(order_key(c, 0));
    }
  }
  uint32_t rank[LANES], par[LANES];
  float m[LANES];
  for (int64_t n = 1; n <= P; n++) {
    // 1. every lane takes its largest candidate and puts its parent's next child in its place
    for (int l = 0; l < LANES; l++) {
      int64_t j = 0;
      float v = -INFINITY;
      if (FLAT) {
        j = f[l].top(&v);
      } else if (heap[l].n > 0) {
        uint64_t top = heap[l].h[1];
        j = slot_of(top);
        v = value_of(top);
      }
      Rec& p = rec[l][j];
      int32_t r = p.ptr;
      p.ptr = r + 1;
      float nxt = (r + 1 < K) ? tab[p.row * K + r + 1] : -INFINITY;
      float cand = p.lp + nxt;
      if (FLAT) {
        f[l].set(j, cand);
      } else if (heap[l].n > 0) {
        if (cand != -INFINITY)
          heap[l].replace_top(order_key(cand, uint32_t(j)));
        else
          heap[l].pop();
      }
      m[l] = v;
      par[l] = uint32_t(j);
      rank[l] = uint32_t(r);
      k0[l] = p.k0;
      k1[l] = p.k1;
    }
    // 2. the new nodes' keys and rows (vectorised over the lanes)
    uint32_t tag[LANES], c0[LANES], c1[LANES];
    for (int l = 0; l < LANES; l++) tag[l] = 2u + rank[l];
    fold_in(k0, k1, tag, c0, c1);
    node_rows(law, c0, c1, st, row);
    // 3. record the new nodes; their best children enter the frontier
    for (int l = 0; l < n_active; l++) {
      Rec& p = rec[l][par[l]];
      int32_t depth = p.depth + 1;
      rec[l][n] = Rec{m[l], row[l], 0, 0, depth, c0[l], c1[l], 0};
      float c = m[l] + first[row[l]];
      __builtin_prefetch(tab + int64_t(row[l]) * K + 1);
      if (FLAT)
        f[l].set(n, c);
      else if (c != -INFINITY)
        heap[l].push(order_key(c, uint32_t(n)));
      int64_t o = (t0 + l) * P + (n - 1);
      out.parent[o] = int32_t(par[l]) - 1;
      out.depth[o] = depth;
      out.logp[o] = m[l];
      out.rank[o] = int32_t(rank[l]);
      out.state[o] = 0;
      out.key[2 * o] = c0[l];
      out.key[2 * o + 1] = c1[l];
    }
  }
}

// The node keys of trees t0 .. t0 + n_active - 1 (N at once, lanes past n_active repeating tree t0)
// from their nodes' parents and ranks (already in `out`): key(node) = fold_in(key(parent), 2 + rank),
// the root's the tree key. `kb` [2 (P + 1) N] holds them by slot in two planes, kb[s N + l] (word 0)
// and kb[(P + 1 + s) N + l] (word 1). N = 16 (AVX2): the parents' keys are packed into vectors in
// registers and the threefry of the two vectors of eight runs as two interleaved chains.
template <int N>
static void node_keys(const uint32_t* tree_keys, int64_t t0, int n_active, int64_t P, uint32_t* kb, const Out& out) {
  uint32_t* w0 = kb;
  uint32_t* w1 = kb + (P + 1) * N;
  const int32_t* par[N];
  const int32_t* rnk[N];
  for (int l = 0; l < N; l++) {
    int64_t t = t0 + (l < n_active ? l : 0);
    w0[l] = tree_keys[2 * t];
    w1[l] = tree_keys[2 * t + 1];
    par[l] = out.parent + t * P;
    rnk[l] = out.rank + t * P;
  }
  for (int64_t i = 0; i < P; i++) {
    int32_t a[N];  // the parents' slots in the planes
    for (int l = 0; l < N; l++) a[l] = (par[l][i] + 1) * N + l;
#ifdef __AVX2__
    if constexpr (N == 16) {
      const __m256i two = _mm256_set1_epi32(2);
#define G8(W, o)                                                                                   \
  _mm256_setr_epi32(int(W[a[o]]), int(W[a[o + 1]]), int(W[a[o + 2]]), int(W[a[o + 3]]), int(W[a[o + 4]]), \
                    int(W[a[o + 5]]), int(W[a[o + 6]]), int(W[a[o + 7]]))
#define R8(o)                                                                                         \
  _mm256_add_epi32(two, _mm256_setr_epi32(rnk[o][i], rnk[o + 1][i], rnk[o + 2][i], rnk[o + 3][i], \
                                          rnk[o + 4][i], rnk[o + 5][i], rnk[o + 6][i], rnk[o + 7][i]))
      __m256i oa0, oa1, ob0, ob1;
      fold_in16(G8(w0, 0), G8(w1, 0), G8(w0, 8), G8(w1, 8), R8(0), R8(8), &oa0, &oa1, &ob0, &ob1);
#undef G8
#undef R8
      __m256i* d0 = reinterpret_cast<__m256i*>(w0 + (i + 1) * N);
      __m256i* d1 = reinterpret_cast<__m256i*>(w1 + (i + 1) * N);
      _mm256_storeu_si256(d0, oa0);
      _mm256_storeu_si256(d0 + 1, ob0);
      _mm256_storeu_si256(d1, oa1);
      _mm256_storeu_si256(d1 + 1, ob1);
      continue;
    }
#endif
    static_assert(N == LANES || N == 2 * LANES, "keys eight or sixteen trees at a time");
    for (int h = 0; h < N; h += LANES) {  // (without AVX2, sixteen trees as two blocks of eight)
      uint32_t p0[LANES], p1[LANES], tag[LANES];
      for (int l = 0; l < LANES; l++) {
        p0[l] = w0[a[h + l]];
        p1[l] = w1[a[h + l]];
        tag[l] = 2u + uint32_t(rnk[h + l][i]);
      }
      fold_in(p0, p1, tag, w0 + (i + 1) * N + h, w1 + (i + 1) * N + h);
    }
  }
  for (int l = 0; l < n_active; l++) {
    uint32_t* dst = out.key + 2 * (t0 + l) * P;
    for (int64_t i = 0; i < P; i++) {
      dst[2 * i] = w0[(i + 1) * N + l];
      dst[2 * i + 1] = w1[(i + 1) * N + l];
    }
  }
}

// Root states (= rows) of trees t0 .. t0 + LANES - 1 of a keyless law.
static void root_rows(const Law& law, const uint32_t* tree_keys, int64_t t0, int n_active, int32_t* row) {
  uint32_t k0[LANES], k1[LANES], s0[LANES], s1[LANES];
  for (int l = 0; l < LANES; l++) {
    int64_t t = t0 + (l < n_active ? l : 0);
    k0[l] = tree_keys[2 * t];
    k1[l] = tree_keys[2 * t + 1];
  }
  if (law.init_kind == INIT_RANDINT) {
    fold_in_const(k0, k1, 1, s0, s1);
    randint(s0, s1, law.n_init, row);
  } else {
    for (int l = 0; l < LANES; l++) row[l] = 0;
  }
}

static inline bool keyless(const Law& law) {
  return law.row_kind == ROW_STATE || (law.row_kind == ROW_ZERO && law.child_kind == CHILD_ZERO);
}

// Flat P (S = P + 1 <= FLAT_MAX slots), laws that need no node key: W = NB * LANES trees searched together,
// slot-major: v[s * W + l] is tree l's candidate at slot s, so one pass over the slots taken so far finds
// every tree's top at once (vertical compares, no horizontal reduction: strictly greater wins, so
// the lowest slot among equal candidates, and slot 0 when all are -inf); then each tree, in scalar
// code, takes its node as search_keyless does. Trees past n_active repeat tree 0 and write nothing.
template <bool HASHED, int NB>
static void search_lanes(const Law& law, const float* first, const int32_t* row0, int64_t P, int64_t t0,
                         int n_active, Rec16* __restrict rec, float* __restrict v, const Out& out) {
  constexpr int W = NB * LANES;  // trees searched together: NB vectors of eight per slot
  const int64_t K = law.K;
  const float* tab = law.table;
  const FastMod mod(law.n_hash);
  for (int l = 0; l < W; l++) {
    rec[l] = Rec16{0.0f, row0[l], 0, 0};
    v[l] = first[row0[l]];
  }
  int64_t base[W];
  for (int l = 0; l < W; l++) base[l] = (t0 + (l < n_active ? l : 0)) * P - 1;
  for (int64_t n = 1; n <= P; n++) {
    alignas(32) float best[W];
    alignas(32) int32_t idx[W];
#if defined(__AVX2__)
    static_assert(LANES == 8, "one AVX2 vector of candidates per slot and block");
    {
      // per vector of eight trees two accumulators, odd and even slots (independent compare-blend
      // chains, 2 * NB of them); each keeps its lowest slot among equal values, and the merge
      // prefers the lower slot on a tie
      __m256 b0[NB], b1[NB];
      __m256i x0[NB], x1[NB];
      for (int h = 0; h < NB; h++) {
        b0[h] = _mm256_load_ps(v + 8 * h);
        b1[h] = _mm256_set1_ps(-INFINITY);
        x0[h] = _mm256_setzero_si256();
        x1[h] = _mm256_set1_epi32(1);
      }
      __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_set1_epi32(-1);
      const __m256i two = _mm256_set1_epi32(2);
      int64_t s = 1;
      for (; s + 1 < n; s += 2) {
        s1 = _mm256_add_epi32(s1, two);
        s0 = _mm256_add_epi32(s0, two);
        for (int h = 0; h < NB; h++) {
          __m256 c1 = _mm256_load_ps(v + s * W + 8 * h), c0 = _mm256_load_ps(v + (s + 1) * W + 8 * h);
          __m256 g1 = _mm256_cmp_ps(c1, b1[h], _CMP_GT_OQ), g0 = _mm256_cmp_ps(c0, b0[h], _CMP_GT_OQ);
          b1[h] = _mm256_blendv_ps(b1[h], c1, g1);
          b0[h] = _mm256_blendv_ps(b0[h], c0, g0);
          x1[h] = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(x1[h]), _mm256_castsi256_ps(s1), g1));
          x0[h] = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(x0[h]), _mm256_castsi256_ps(s0), g0));
        }
      }
      if (s < n) {  // one odd slot left
        const __m256 sv = _mm256_castsi256_ps(_mm256_set1_epi32(int(s)));
        for (int h = 0; h < NB; h++) {
          __m256 c1 = _mm256_load_ps(v + s * W + 8 * h);
          __m256 g1 = _mm256_cmp_ps(c1, b1[h], _CMP_GT_OQ);
          b1[h] = _mm256_blendv_ps(b1[h], c1, g1);
          x1[h] = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(x1[h]), sv, g1));
        }
      }
      for (int h = 0; h < NB; h++) {
        __m256 take1 = _mm256_or_ps(_mm256_cmp_ps(b1[h], b0[h], _CMP_GT_OQ),
                                    _mm256_and_ps(_mm256_cmp_ps(b1[h], b0[h], _CMP_EQ_OQ),
                                                  _mm256_castsi256_ps(_mm256_cmpgt_epi32(x0[h], x1[h]))));
        _mm256_store_ps(best + 8 * h, _mm256_blendv_ps(b0[h], b1[h], take1));
        _mm256_store_ps(reinterpret_cast<float*>(idx + 8 * h),
                        _mm256_blendv_ps(_mm256_castsi256_ps(x0[h]), _mm256_castsi256_ps(x1[h]), take1));
      }
    }
#else
    for (int l = 0; l < W; l++) {
      best[l] = v[l];
      idx[l] = 0;
    }
    for (int64_t s = 1; s < n; s++) {
      const float* vs = v + s * W;
      for (int l = 0; l < W; l++) {
        bool gt = vs[l] > best[l];
        best[l] = gt ? vs[l] : best[l];
        idx[l] = gt ? int32_t(s) : idx[l];
      }
    }
#endif
    for (int l = 0; l < W; l++) {
      const int64_t j = idx[l];
      const float m = best[l];
      Rec16& p = rec[j * W + l];
      int32_t r = p.ptr;
      p.ptr = r + 1;
      float nxt = (r + 1 < K) ? tab[int64_t(p.row) * K + r + 1] : -INFINITY;
      v[j * W + l] = p.lp + nxt;  // the parent's next child replaces it
      int32_t row = HASHED ? hash_state(uint32_t(p.row), uint32_t(r), mod) : 0;
      v[n * W + l] = m + first[row];  // the new node's best child enters at slot n
      __builtin_prefetch(tab + int64_t(row) * K + 1);
      int32_t depth = p.depth + 1;
      rec[n * W + l] = Rec16{m, row, 0, depth};
      if (l < n_active) {
        int64_t i = base[l] + n;
        out.parent[i] = int32_t(j) - 1;
        out.depth[i] = depth;
        out.logp[i] = m;
        out.rank[i] = r;
        out.state[i] = row;
      }
    }
  }
}

static void search_all(const Law& law, const uint32_t* tree_keys, int64_t B, int64_t P, const Out& out) {
  if (keyless(law)) {
    static_assert(LANES % GROUP_HEAP == 0, "LANES must be a multiple of GROUP_HEAP");
    std::vector<float> first(law.n_rows);
    for (uint32_t i = 0; i < law.n_rows; i++) first[i] = law.table[int64_t(i) * law.K];
    const bool flat = P + 1 <= FLAT_MAX;
    const bool hashed = law.child_kind == CHILD_HASH;
    // flat: one group's records and candidates, slot-major; heap: GROUP_HEAP trees' records and heaps
    constexpr int FW = FLAT_BLOCKS * LANES;  // trees the flat search takes together
    std::vector<Rec16> recs(size_t(flat ? FW : GROUP_HEAP) * size_t(P + 1));
    std::vector<float> lv(flat ? size_t(FW) * size_t(P + 1) + 8 : 0);
    float* lva = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(lv.data()) + 31) & ~uintptr_t(31));
    std::vector<uint64_t> heaps(flat ? 0 : size_t(GROUP_HEAP) * size_t(P + 2));
    Rec16* rec[GROUP_HEAP];
    uint64_t* hb[GROUP_HEAP];
    for (int g = 0; g < GROUP_HEAP && !flat; g++) {
      rec[g] = recs.data() + g * (P + 1);
      hb[g] = heaps.data() + g * (P + 2);
    }
    std::vector<uint32_t> kb(size_t(2 * FW * (P + 1)));
    int32_t row[FW];
    // node keys for 16 trees at once (two interleaved threefry chains) while their key planes stay in
    // L2 (measured: P = 16 and 64 10-15% faster in all, P = 256 6%; P = 4096 a little slower)
    const bool keys16 = FW == 16 && int64_t(2 * 16 * 4) * (P + 1) <= (256 << 10);
    const int64_t step = (flat || keys16) ? FW : LANES;
    for (int64_t t0 = 0; t0 < B; t0 += step) {
      const int n_group = int(B - t0 < step ? B - t0 : step);
      for (int b = 0; b < n_group; b += LANES) root_rows(law, tree_keys, t0 + b, std::min(n_group - b, LANES), row + b);
      for (int l = (n_group + LANES - 1) / LANES * LANES; l < step; l++) row[l] = row[0];  // (not written out)
      if (flat) {
        (hashed ? search_lanes<true, FLAT_BLOCKS> : search_lanes<false, FLAT_BLOCKS>)(
            law, first.data(), row, P, t0, n_group, recs.data(), lva, out);
      } else {
        int l = 0;
        for (; l + GROUP_HEAP <= n_group; l += GROUP_HEAP) {
          int64_t o[GROUP_HEAP];
          for (int g = 0; g < GROUP_HEAP; g++) o[g] = (t0 + l + g) * P;
          (hashed ? search_keyless<GROUP_HEAP, true> : search_keyless<GROUP_HEAP, false>)(
              law, first.data(), row + l, P, rec, hb, o, out);
        }
        for (; l < n_group; l++) {
          int64_t o = (t0 + l) * P;
          (hashed ? search_keyless<1, true> : search_keyless<1, false>)(law, first.data(), row + l, P, rec, hb, &o,
                                                                       out);
        }
      }
      if (keys16)
        node_keys<2 * LANES>(tree_keys, t0, n_group, P, kb.data(), out);
      else
        for (int b = 0; b < n_group; b += LANES)
          node_keys<LANES>(tree_keys, t0 + b, std::min(n_group - b, LANES), P, kb.data(), out);
    }
    return;
  }
  // keyed laws (pool): hidden state 0 (every node), rows from the node keys
  std::vector<float> first(law.n_rows);
  for (uint32_t i = 0; i < law.n_rows; i++) first[i] = law.table[int64_t(i) * law.K];
  const int64_t fstride = ((P + 1 + 7) / 8) * 8 + 8;
  std::vector<Rec> recs(size_t(LANES) * size_t(P + 1));
  std::vector<uint64_t> heaps(size_t(LANES) * size_t(P + 2));
  std::vector<float> fbufs(size_t(LANES * fstride + 8));
  float* fal = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(fbufs.data()) + 31) & ~uintptr_t(31));
  const bool flat = P + 1 <= FLAT_MAX;
  for (int64_t t0 = 0; t0 < B; t0 += LANES) {
    int n_active = int(B - t0 < LANES ? B - t0 : LANES);
    (flat ? search_keyed<true> : search_keyed<false>)(law, first.data(), tree_keys, t0, n_active, P, recs.data(), fal,
                                                      fstride, heaps.data(), out);
  }
}

// -- drawn laws (dirichlet, logitnormal, zipf, temp of them; Markov laws of them and of fixed, below): a row of V
//    variates per node ---------
//
// Not the JAX kernel's bits (XLA's float32 log/exp/gamma cannot be reproduced): a documented stream of its own.
// Node keys are the JAX kernel's (child key = fold_in(parent key, 2 + rank), draw key = fold_in(node key, 0)); the
// variates of a node come from threefry2x32 under its draw key with counter (j, stream), j = 0, 1, ...:
//   stream 1: normals, Box-Muller on the two words of counter j (normals 2j and 2j + 1);
//   stream 2: the Marsaglia-Tsang acceptance uniforms (word w of counter j: candidate 2j + w);
//   stream 3: the uniforms U of Gamma(alpha) = Gamma(alpha + 1) U^(1/alpha) (word w of counter j: entry 2j + w).
// dirichlet: log-weights w_i = log G_i, G_i ~ Gamma(alpha) (alpha >= 1: Marsaglia-Tsang; alpha < 1: w_i = alpha
//   log G'_i + log U_i with G'_i ~ Gamma(alpha + 1), scaled by 1/alpha below); candidates are taken in counter order,
//   the accepted ones fill the row in order; logitnormal: w_i = Z_i; zipf: w_i = -log(i + 1) (a table), the node's
//   exponent exp(log s + s_sd Z) from normal 0. Then log p_i = c (w_i - max w) - log sum_j exp(c (w_j - max w)), with c
//   the law's scale (1/alpha, sigma, the exponent; a temperature's 1/T folded in by the law in float64; c = inf:
//   the point mass on the first largest entry (a drawn row's largest entries tie with probability 0 but for float32
//   rounding), c = 0: uniform), and the K largest entries kept: selection by a running threshold, then only the
//   first SORTED0 of them sorted (the search sorts further, sort_more, when it reaches them). Uniforms: (0, 1] as
//   (w >> 1) 2^-31 + 2^-32 (radius and acceptance), [0, 1) as (w >> 8) 2^-24 (the angle). log, exp, sin and cos
//   are float32 polynomials (Cephes), branch-free so that the loops vectorise.

enum DrawKind { DRAW_DIRICHLET = 0, DRAW_LOGITNORMAL = 1, DRAW_ZIPF = 2, DRAW_FIXED = 3 };  // fixed: a Markov state's

constexpr int TB = 64;  // counters per vectorised threefry block

// threefry2x32 of counters (j0 + l, stream), l < TB, under key (k0, k1): written to o0[l], o1[l].
static inline void tf_block(uint32_t k0, uint32_t k1, uint32_t j0, uint32_t stream, uint32_t* __restrict o0,
                            uint32_t* __restrict o1) {
  const uint32_t k2 = k0 ^ k1 ^ 0x1BD11BDAu;
  for (int l = 0; l < TB; l++) {
    uint32_t x0 = j0 + uint32_t(l) + k0, x1 = stream + k1;
#define R(D)        \
  x0 += x1;         \
  x1 = rotl(x1, D); \
  x1 ^= x0;
    R(13) R(15) R(26) R(6) x0 += k1; x1 += k2 + 1u;
    R(17) R(29) R(16) R(24) x0 += k2; x1 += k0 + 2u;
    R(13) R(15) R(26) R(6) x0 += k0; x1 += k1 + 3u;
    R(17) R(29) R(16) R(24) x0 += k1; x1 += k2 + 4u;
    R(13) R(15) R(26) R(6) x0 += k2; x1 += k0 + 5u;
#undef R
    o0[l] = x0;
    o1[l] = x1;
  }
}

static inline float f_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t u_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// (0, 1]: never 0, so its log is finite (>= -22.2)
static inline float u01_open0(uint32_t w) { return float(int32_t(w >> 1)) * 4.656612873077393e-10f + 2.3283064365386963e-10f; }
// [0, 1), 24 bits
static inline float u01_24(uint32_t w) { return float(int32_t(w >> 8)) * 5.9604644775390625e-08f; }

// natural log of x > 0 (normal numbers; Cephes logf, ~1 ulp)
static inline float vlog(float x) {
  uint32_t i = u_of(x);
  float e = float(int32_t((i >> 23) & 0xffu) - 126);
  float m = f_of((i & 0x807fffffu) | 0x3f000000u);  // [0.5, 1)
  bool lo = m < 0.707106781186547524f;
  e = lo ? e - 1.0f : e;
  m = lo ? m + m - 1.0f : m - 1.0f;
  float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  y += -2.12194440e-4f * e;
  y += -0.5f * z;
  return m + y + 0.693359375f * e;
}

// exp(x) for x <= 0 (x < -87: 0; -inf: 0; Cephes expf, ~1 ulp)
static inline float vexp_neg(float x) {
  bool under = !(x >= -87.0f);
  float xc = under ? -87.0f : x;
  float n = __builtin_floorf(xc * 1.44269504088896341f + 0.5f);
  float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
  float z = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  float p = f_of(uint32_t(int32_t(n) + 127) << 23);
  return under ? 0.0f : y * p;
}

// (cos 2 pi t, sin 2 pi t) for t in [0, 1): quadrant q = round(4t), a = 2 pi (t - q/4) in [-pi/4, pi/4]
static inline void vsincos2pi(float t, float* c, float* s) {
  float q = __builtin_floorf(4.0f * t + 0.5f);
  float a = (t - 0.25f * q) * 6.28318530717958648f;
  float z = a * a;
  float sn = ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f) * z * a + a;
  float cs = ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f) * z * z - 0.5f * z + 1.0f;
  int qi = int(q) & 3;
  float cc = (qi == 0) ? cs : (qi == 1) ? -sn : (qi == 2) ? -cs : sn;
  float ss = (qi == 0) ? sn : (qi == 1) ? cs : (qi == 2) ? -sn : -cs;
  *c = cc;
  *s = ss;
}

// 2 TB standard normals from counters j0 .. j0 + TB - 1 of stream 1: z[2l] and z[2l + 1] from counter j0 + l
static inline void normals_block(uint32_t k0, uint32_t k1, uint32_t j0, float* __restrict z) {
  alignas(64) uint32_t a[TB], b[TB];
  alignas(64) float c[TB], s[TB];
  tf_block(k0, k1, j0, 1u, a, b);
  for (int l = 0; l < TB; l++) {
    float r = __builtin_sqrtf(-2.0f * vlog(u01_open0(a[l])));
    float cs, sn;
    vsincos2pi(u01_24(b[l]), &cs, &sn);
    c[l] = r * cs;
    s[l] = r * sn;
  }
  for (int l = 0; l < TB; l++) {
    z[2 * l] = c[l];
    z[2 * l + 1] = s[l];
  }
}

struct Drawn {
  int32_t kind;
  int64_t V, K;
  float alpha;      // dirichlet: alpha
  float d, cg, ld;  // Marsaglia-Tsang on a = alpha (alpha >= 1) or alpha + 1: d = a - 1/3, c = 1/sqrt(9 d), log d
  bool power;       // dirichlet alpha < 1: the power-of-a-uniform step
  double logs, s_sd;  // zipf: log s, s_sd
  float scale;        // c (dirichlet, logitnormal); zipf: a factor on the node's exponent (1 from the laws)
  const float* neglog;  // zipf: -log(i + 1), [V]
  const float* fixed;   // fixed (a Markov law's state): its K largest log-probabilities, decreasing, -inf past V
};

constexpr int64_t GROUP = 16;  // top_k's groups of entries (their maxima set the first threshold)

// per-thread scratch of one row
struct RowBuf {
  std::vector<float> w, sel, gmax;
  explicit RowBuf(int64_t V, int64_t K)
      : w(size_t(V + 4 * TB)), sel(size_t(2 * K + 4 * TB)), gmax(size_t(V / GROUP + 1)) {}
};

// the accepted x[i] (ok[i] != 0) of a block of 2 TB, in order, appended at w[filled..): the new count. Writes up to
// 2 TB entries past it (w is padded), so a caller keeps the first V.
static inline int64_t accept_into(float* __restrict w, int64_t filled, const float* __restrict x,
                                  const int32_t* __restrict ok) {
#ifdef __AVX512F__
  for (int i = 0; i < 2 * TB; i += 16) {
    const __mmask16 m = _mm512_test_epi32_mask(_mm512_load_si512(ok + i), _mm512_set1_epi32(-1));
    _mm512_storeu_ps(w + filled, _mm512_maskz_compress_ps(m, _mm512_load_ps(x + i)));
    filled += __builtin_popcount(unsigned(m));
  }
#else
  for (int i = 0; i < 2 * TB; i++) {  // branch-free: every x[i] written, the count advanced by the accepted ones
    w[filled] = x[i];
    filled += ok[i];
  }
#endif
  return filled;
}

// log-weights of the dirichlet row: w[0..V) (w holds V + 2 TB floats at least: a block's variates are stored whole)
static void dirichlet_weights(const Drawn& L, uint32_t k0, uint32_t k1, float* __restrict w) {
  const int64_t V = L.V;
  alignas(64) float z[2 * TB], u[2 * TB], x[2 * TB];
  alignas(64) uint32_t a[TB], b[TB];
  alignas(64) int32_t ok[2 * TB];
  const float d = L.d, c = L.cg, ld = L.ld;
  int64_t filled = 0;
  uint32_t j = 0;
  while (filled < V) {
    normals_block(k0, k1, j, z);
    tf_block(k0, k1, j, 2u, a, b);
    for (int l = 0; l < TB; l++) {
      u[2 * l] = u01_open0(a[l]);
      u[2 * l + 1] = u01_open0(b[l]);
    }
    for (int i = 0; i < 2 * TB; i++) {
      float t = 1.0f + c * z[i];
      float v = t * t * t;
      bool pos = v > 0.0f;
      float lv = vlog(pos ? v : 1.0f);
      float zz = z[i];
      ok[i] = int32_t(pos) & int32_t(vlog(u[i]) < 0.5f * zz * zz + d - d * v + d * lv);
      x[i] = ld + lv;
    }
    filled = accept_into(w, filled, x, ok);
    j += TB;
  }
  if (L.power) {
    const float alpha = L.alpha;
    for (int64_t i0 = 0; i0 < V; i0 += 2 * TB) {
      tf_block(k0, k1, uint32_t(i0 / 2), 3u, a, b);
      const int64_t n = std::min<int64_t>(2 * TB, V - i0);
      for (int l = 0; l < TB; l++) {
        u[2 * l] = vlog(u01_open0(a[l]));
        u[2 * l + 1] = vlog(u01_open0(b[l]));
      }
      float* wi = w + i0;
      for (int64_t i = 0; i < n; i++) wi[i] = alpha * wi[i] + u[i];
    }
  }
}

static void logitnormal_weights(const Drawn& L, uint32_t k0, uint32_t k1, float* __restrict w) {
  for (int64_t i0 = 0; i0 < L.V; i0 += 2 * TB) normals_block(k0, k1, uint32_t(i0 / 2), w + i0);  // w padded
}

// max of w[0..n) (n >= 1), 16 partial maxima (vectorised, deterministic)
static float row_max(const float* __restrict w, int64_t n) {
  float m[16];
  for (int l = 0; l < 16; l++) m[l] = -INFINITY;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; l++) m[l] = w[i + l] > m[l] ? w[i + l] : m[l];
  for (; i < n; i++) m[0] = w[i] > m[0] ? w[i] : m[0];
  float r = m[0];
  for (int l = 1; l < 16; l++) r = m[l] > r ? m[l] : r;
  return r;
}

// sum_i exp(c (w_i - mx)) over w[0..n), c finite > 0, 16 partial sums
static float row_sumexp(const float* __restrict w, int64_t n, float mx, float c) {
  float s[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; l++) {
      float y = w[i + l] == mx ? 0.0f : (w[i + l] - mx) * c;
      s[l] += vexp_neg(y);
    }
  for (; i < n; i++) s[0] += vexp_neg(w[i] == mx ? 0.0f : (w[i] - mx) * c);
  float t = 0.0f;
  for (int l = 0; l < 16; l++) t += s[l];
  return t;
}

constexpr int64_t DENSE = 8;  // K of V at least V / DENSE: selection in place over the whole row
constexpr int64_t SORTED0 = 16;  // entries of a fresh row sorted at once; the rest when the search reaches them
constexpr int64_t LAZY = SORTED0;  // entries of a fresh row a search keeps; the whole row when it reaches past them

// Sort row[done..) far enough that entries [0, need] are in decreasing order (the row's first `done` already are and
// are each >= every later one); returns the new sorted length (doubling, at most K).
static inline int64_t sort_more(float* row, int64_t done, int64_t need, int64_t K) {
  int64_t to = std::min(K, std::max(need + 1, 2 * done));
  std::partial_sort(row + done, row + to, row + K, std::greater<float>());
  return to;
}

// the K largest of w[0..V) into out[0..K), the first min(K, SORTED0) sorted decreasing, each of them >= every later
// entry (a running threshold: candidates above it are buffered, the buffer cut back to its K largest when it fills).
// The first threshold, when there are at least K groups of GROUP entries (disjoint; entries past the last whole chunk
// of eight groups are in none): the K-th largest of the groups' maxima (those K maxima are K entries at least that
// large, so every one of the K largest is too; `gmax` holds V / GROUP floats); else the K-th largest of the first K
// entries. Only the values are kept, so the result is the same
// whichever threshold starts (ties are equal values).
static void top_k(const float* __restrict w, int64_t V, int64_t K, float* __restrict buf, float* __restrict gmax,
                  float* __restrict out) {
  if (K >= V) {
    std::memcpy(out, w, size_t(V) * 4);
    std::partial_sort(out, out + std::min(V, SORTED0), out + V, std::greater<float>());
    return;
  }
  int64_t n = 0;
  const int64_t cap = 2 * K + 2 * TB;
  float thr = -INFINITY;
  int64_t i = 0;
  const int64_t ng = V / (8 * GROUP) * 8;  // groups of GROUP entries, eight to a chunk (the rest in none)
  if (ng >= K) {
    for (int64_t c = 0; c < ng / 8; c++) {  // chunk c of 8 GROUP entries: group 8 c + l holds its entries 8 r + l
      const float* x = w + c * 8 * GROUP;
      float m[8];
      for (int l = 0; l < 8; l++) m[l] = x[l];
      for (int r = 1; r < GROUP; r++)
        for (int l = 0; l < 8; l++) m[l] = x[8 * r + l] > m[l] ? x[8 * r + l] : m[l];
      for (int l = 0; l < 8; l++) gmax[8 * c + l] = m[l];
    }
    std::nth_element(gmax, gmax + (K - 1), gmax + ng, std::greater<float>());
    // strictly above the largest float below the K-th maximum: every entry at least that maximum (>= K of them)
    thr = std::nextafter(gmax[K - 1], -INFINITY);
  }
  if (thr == -INFINITY) {  // too few groups (or fewer than K finite maxima): the first K entries set it
    for (; i < K; i++) buf[n++] = w[i];
    std::nth_element(buf, buf + (K - 1), buf + n, std::greater<float>());
    thr = buf[K - 1];
  }
  auto take = [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; t++) {
      if (w[t] > thr) {
        buf[n++] = w[t];
        if (n == cap) {
          std::nth_element(buf, buf + (K - 1), buf + n, std::greater<float>());
          n = K;
          thr = buf[K - 1];
        }
      }
    }
  };
  for (; i < V && (i & 15); i++) take(i, i + 1);
  for (; i + 16 <= V; i += 16) {  // sixteen entries a compare; those above the threshold packed (AVX-512) or one by one
#ifdef __AVX512F__
    // those above it packed into the buffer at once, unless the buffer would fill (then one by one, so that it is cut
    // back at the same entries)
    const __m512 x = _mm512_loadu_ps(w + i);
    const __mmask16 gt = _mm512_cmp_ps_mask(x, _mm512_set1_ps(thr), _CMP_GT_OQ);
    const int64_t cnt = __builtin_popcount(unsigned(gt));
    if (n + cnt < cap) {
      _mm512_storeu_ps(buf + n, _mm512_maskz_compress_ps(gt, x));
      n += cnt;
      continue;
    }
    const bool any = true;
#elif defined(__AVX2__)
    const __m256 t = _mm256_set1_ps(thr);
    const __m256 gt = _mm256_or_ps(_mm256_cmp_ps(_mm256_loadu_ps(w + i), t, _CMP_GT_OQ),
                                   _mm256_cmp_ps(_mm256_loadu_ps(w + i + 8), t, _CMP_GT_OQ));
    const bool any = _mm256_movemask_ps(gt) != 0;
#else
    int32_t any = 0;
    for (int l = 0; l < 16; l++) any |= int32_t(w[i + l] > thr);
#endif
    if (any) take(i, i + 16);
  }
  take(i, V);
  std::nth_element(buf, buf + (K - 1), buf + n, std::greater<float>());
  std::partial_sort(buf, buf + std::min(K, SORTED0), buf + K, std::greater<float>());
  std::memcpy(out, buf, size_t(K) * 4);
}

// the node's K (= row length Kr <= K, -inf past V) largest log-probabilities from draw key (k0, k1): the first
// min(Kr, SORTED0) decreasing, each >= every later entry (the rest in no order: sort_more). Returns how many of the
// K entries are sorted (all of them for zipf, a point mass and the uniform law). Only the `want` largest are kept
// when fewer than the row's min(K, V): `*held` is how many entries out[0..) holds (K once the row is whole), and a
// second call with want = K from the same key gives the whole row, its first entries the same values.
static int64_t draw_row(const Drawn& L, uint32_t k0, uint32_t k1, RowBuf& rb, float* __restrict out, int64_t want,
                        int32_t* held) {
  const int64_t V = L.V, Kr = std::min(want, std::min(L.K, L.V));
  float* w = rb.w.data();
  *held = int32_t(Kr == std::min(L.K, L.V) ? L.K : Kr);
  if (*held == L.K)
    for (int64_t i = Kr; i < L.K; i++) out[i] = -INFINITY;
  if (L.kind == DRAW_FIXED) {  // the same row at every node: no variate
    std::memcpy(out, L.fixed, size_t(L.K) * 4);
    *held = int32_t(L.K);
    return L.K;
  }
  if (L.kind == DRAW_ZIPF) {  // already sorted: w = -log(i + 1), scaled by the node's exponent
    // normal 0 of stream 1 (as normals_block computes it), from the one counter it needs
    uint32_t kk0[LANES], kk1[LANES], c0[LANES] = {0}, c1[LANES], a[LANES], b[LANES];
    for (int l = 0; l < LANES; l++) {
      kk0[l] = k0;
      kk1[l] = k1;
      c1[l] = 1u;
    }
    threefry(kk0, kk1, c0, c1, a, b);
    float cs, sn;
    vsincos2pi(u01_24(b[0]), &cs, &sn);
    const float z0 = __builtin_sqrtf(-2.0f * vlog(u01_open0(a[0]))) * cs;
    // the exponent in float32 (inf past its range, 0 below), then the scale (1: a temperature is folded into log s);
    // a point mass or the uniform law stays so
    const float s = float(std::exp(L.logs + L.s_sd * double(z0)));
    const float c = (s == 0.0f || !(s < INFINITY)) ? s : s * L.scale;
    const float* nl = L.neglog;
    if (!(c < INFINITY)) {  // the point mass on rank 0
      out[0] = 0.0f;
      for (int64_t i = 1; i < Kr; i++) out[i] = -INFINITY;
      return L.K;
    }
    float lse = std::log(row_sumexp(nl, V, 0.0f, c));
    for (int64_t i = 0; i < Kr; i++) out[i] = std::fmin((nl[i] == 0.0f ? 0.0f : nl[i] * c) - lse, 0.0f);
    return L.K;
  }
  if (L.kind == DRAW_DIRICHLET)
    dirichlet_weights(L, k0, k1, w);
  else
    logitnormal_weights(L, k0, k1, w);
  const float c = L.scale;
  const float mx = row_max(w, V);
  if (!(c < INFINITY)) {  // the point mass (on the first largest entry: every other is -inf)
    out[0] = 0.0f;
    for (int64_t i = 1; i < Kr; i++) out[i] = -INFINITY;
    return L.K;
  }
  // the normaliser first: a dense selection reorders w (the same sum, in the same order, as after it)
  const float lse = c == 0.0f ? 0.0f : std::log(row_sumexp(w, V, mx, c));
  if (Kr < V && DENSE * Kr >= V) {  // a large share of the row: one selection over it in place
    std::nth_element(w, w + (Kr - 1), w + V, std::greater<float>());
    std::memcpy(out, w, size_t(Kr) * 4);
    std::partial_sort(out, out + std::min(Kr, SORTED0), out + Kr, std::greater<float>());
  } else {
    top_k(w, V, Kr, rb.sel.data(), rb.gmax.data(), out);
  }
  if (c == 0.0f) {  // uniform
    float lu = -std::log(float(V));
    for (int64_t i = 0; i < Kr; i++) out[i] = lu;
    return L.K;
  }
  for (int64_t i = 0; i < Kr; i++) out[i] = std::fmin((out[i] == mx ? 0.0f : (out[i] - mx) * c) - lse, 0.0f);
  return std::min(Kr, SORTED0);
}

// -- Markov laws of drawn (and fixed) states: the hidden state by inverse CDF, then the state's law ------------------
//
// Not the JAX kernel's Gumbel draw: a stream of its own. A node's state key is the JAX kernel's (fold_in(node key, 1));
// its uniform U in [0, 1) has 53 bits from threefry2x32 of counter (0, 4) under it ((a >> 5) 2^26 + (b >> 6), times
// 2^-53), and the state is the first s with U < F(s), F the cumulative sum (float64) of the row's probabilities
// exp(log p - max log p) / sum, F = 1 from the last state of positive probability on (a state whose probability is 0,
// or below about e^-745 of the largest, where the float64 exp underflows, is never drawn). The root's row is `initial`, a child's of rank r the parent's state's kernel row min(r, R - 1).

// the cumulative distribution of the float32 log-probabilities lp[0..S) into F[0..S)
static void cumulative(const float* lp, int64_t S, double* F) {
  double mx = -INFINITY, sum = 0.0;
  for (int64_t i = 0; i < S; i++) mx = std::max(mx, double(lp[i]));
  int64_t last = 0;
  for (int64_t i = 0; i < S; i++) {
    double p = lp[i] == -INFINITY ? 0.0 : std::exp(double(lp[i]) - mx);
    sum += p;
    F[i] = sum;
    if (p > 0.0) last = i;
  }
  for (int64_t i = 0; i < S; i++) F[i] = i >= last ? 1.0 : F[i] / sum;
}

struct States {
  std::vector<Drawn> laws;  // per state
  std::vector<double> init;  // the initial row, cumulative [S]
  const float* log_kernel = nullptr;  // [S, R, S]
  std::unordered_map<int64_t, std::vector<double>> kern;  // the kernel rows made cumulative when first needed
  int64_t S = 0, R = 0;

  // the cumulative kernel row of a child of rank r whose parent has state s
  const double* row(int32_t s, int64_t r) {
    const int64_t i = int64_t(s) * R + std::min(r, R - 1);
    std::vector<double>& F = kern[i];
    if (F.empty()) {
      F.resize(size_t(S));
      cumulative(log_kernel + i * S, S, F.data());
    }
    return F.data();
  }
};

// the state drawn from the cumulative row F[0..S) under the node key (k0, k1)
static inline int32_t draw_state(const double* F, int64_t S, uint32_t k0, uint32_t k1) {
  uint32_t kk0[LANES] = {k0}, kk1[LANES] = {k1}, sk0[LANES], sk1[LANES];
  fold_in_const(kk0, kk1, 1, sk0, sk1);
  uint32_t c0[LANES] = {0}, c1[LANES], a[LANES], b[LANES];
  for (int l = 0; l < LANES; l++) c1[l] = 4u;
  threefry(sk0, sk1, c0, c1, a, b);
  const double u = (double(a[0] >> 5) * 67108864.0 + double(b[0] >> 6)) * (1.0 / 9007199254740992.0);
  return int32_t(std::upper_bound(F, F + S, u) - F);  // the first F(s) > u (F(S - 1) = 1 > u)
}

// the best-first search of trees [0, B) of a drawn law (mk null) or of a Markov law of drawn states (L unused), one
// tree at a time, a heap frontier; each node's row of K entries is drawn when the node is taken (the root's first)
static void search_drawn(const Drawn& L, States* mk, const uint32_t* tree_keys, int64_t B, int64_t P,
                         const Out& out) {
  const int64_t K = L.K, S = P + 1;
  const size_t ns = size_t(S);
  std::vector<float> rows(ns * size_t(K));
  std::vector<Rec> rec(ns);
  std::vector<uint64_t> hb(ns + 1);
  int64_t V = L.V;
  if (mk)
    for (const Drawn& q : mk->laws) V = std::max(V, q.V);
  RowBuf rb(V, K);
  // the first `want` entries of the row of the node of key (nk0, nk1) in `state`: drawn under fold_in(key, 0)
  auto node_row = [&](uint32_t nk0, uint32_t nk1, int32_t state, float* row, int64_t want, int32_t* held) {
    uint32_t kk0[LANES] = {nk0}, kk1[LANES] = {nk1}, dk0[LANES], dk1[LANES];
    fold_in_const(kk0, kk1, 0, dk0, dk1);
    return draw_row(mk ? mk->laws[state] : L, dk0[0], dk1[0], rb, row, want, held);
  };
  for (int64_t t = 0; t < B; t++) {
    uint32_t k0 = tree_keys[2 * t], k1 = tree_keys[2 * t + 1];
    Heap hp{hb.data(), 0};
    int32_t held_root;
    int32_t s0 = mk ? draw_state(mk->init.data(), mk->S, k0, k1) : 0;
    const int64_t sorted_root = node_row(k0, k1, s0, rows.data(), LAZY, &held_root);
    // Rec.row: how many row entries are sorted; Rec.held: how many are drawn (a row's first LAZY until the search
    // reaches past them: drawn again whole from the node's key, the same values)
    rec[0] = Rec{0.0f, int32_t(sorted_root), 0, s0, 0, k0, k1, held_root};
    if (rows[0] != -INFINITY) hp.push(order_key(rows[0], 0));
    for (int64_t n = 1; n <= P; n++) {
      int64_t j = 0;
      float m = -INFINITY;
      if (hp.n > 0) {
        uint64_t top = hp.h[1];
        j = slot_of(top);
        m = value_of(top);
      }
      Rec& p = rec[j];
      int32_t r = p.ptr;
      p.ptr = r + 1;
      if (r + 1 < K && r + 1 >= p.held)  // past the entries drawn: the whole row, from the node's key
        p.row = int32_t(node_row(p.k0, p.k1, p.state, rows.data() + size_t(j) * K, K, &p.held));
      if (r + 1 < K && r + 1 >= p.row) p.row = int32_t(sort_more(rows.data() + size_t(j) * K, p.row, r + 1, K));
      float nxt = (r + 1 < K) ? rows[size_t(j) * K + r + 1] : -INFINITY;
      float cand = p.lp + nxt;
      if (hp.n > 0) {
        if (cand != -INFINITY)
          hp.replace_top(order_key(cand, uint32_t(j)));
        else
          hp.pop();
      }
      uint32_t pk0[LANES] = {p.k0}, pk1[LANES] = {p.k1}, tag[LANES] = {2u + uint32_t(r)}, c0[LANES], c1[LANES];
      fold_in(pk0, pk1, tag, c0, c1);
      int32_t sn = 0;
      if (mk) sn = draw_state(mk->row(p.state, r), mk->S, c0[0], c1[0]);
      float* row = rows.data() + size_t(n) * K;
      int32_t held_n;
      const int64_t sorted_n = node_row(c0[0], c1[0], sn, row, LAZY, &held_n);
      int32_t depth = p.depth + 1;
      rec[n] = Rec{m, int32_t(sorted_n), 0, sn, depth, c0[0], c1[0], held_n};
      float c = m + row[0];
      if (c != -INFINITY) hp.push(order_key(c, uint32_t(n)));
      int64_t o = t * P + (n - 1);
      out.parent[o] = int32_t(j) - 1;
      out.depth[o] = depth;
      out.logp[o] = m;
      out.rank[o] = r;
      out.state[o] = sn;
      out.key[2 * o] = c0[0];
      out.key[2 * o + 1] = c1[0];
    }
  }
}

// the drawn law of the attributes (false: an unknown kind)
static bool drawn_law(Drawn& L, ffi::Buffer<ffi::F32>& table, int64_t kind, int64_t V, int64_t K, double a, double b,
                      double scale) {
  L.kind = int32_t(kind);
  L.V = V;
  L.K = K;
  L.scale = float(scale);  // inf past the float range
  if (kind == DRAW_DIRICHLET) {
    double ag = a < 1.0 ? a + 1.0 : a, d = ag - 1.0 / 3.0;
    L.alpha = float(a);
    L.power = a < 1.0;
    L.d = float(d);
    L.cg = float(1.0 / std::sqrt(9.0 * d));
    L.ld = float(std::log(d));
  } else if (kind == DRAW_ZIPF) {
    L.logs = a;  // log s, exact in float64 (a temperature folds into it: s / T may pass float64's range)
    L.s_sd = b;
    L.neglog = table.typed_data();
  } else if (kind != DRAW_LOGITNORMAL) {
    return false;
  }
  return true;
}

ffi::Error DrawnImpl(ffi::Buffer<ffi::F32> table, ffi::Buffer<ffi::U32> keys, int64_t kind, int64_t V, int64_t K,
                     double a, double b, double scale, ffi::ResultBuffer<ffi::S32> parent,
                     ffi::ResultBuffer<ffi::S32> depth, ffi::ResultBuffer<ffi::F32> logp,
                     ffi::ResultBuffer<ffi::S32> rank, ffi::ResultBuffer<ffi::S32> state,
                     ffi::ResultBuffer<ffi::U32> key) {
  auto kd = keys.dimensions();
  auto od = logp->dimensions();
  if (kd.size() < 1 || kd.back() != 2 || od.size() < 1 || V < 1 || K < 1)
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: bad operand shapes");
  if (kind == DRAW_ZIPF && int64_t(table.element_count()) < V)
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: zipf needs its -log(i) table");
  const int64_t P = od.back();
  const int64_t B = int64_t(keys.element_count() / 2);
  Drawn L{};
  if (!drawn_law(L, table, kind, V, K, a, b, scale))
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: unknown drawn law");
  Out out{parent->typed_data(), depth->typed_data(), rank->typed_data(), state->typed_data(), logp->typed_data(),
          key->typed_data()};
  search_drawn(L, nullptr, keys.typed_data(), B, P, out);
  return ffi::Error::Success();
}


// A Markov law of drawn or fixed states: neglog [Vz] (zipf states' -log(i + 1)), fixed [F, K] (fixed states' rows),
// log_init [S], log_kernel [S, R, S]; the attribute params [6 S] (per state: kind, V, a, b, scale, its row of `fixed`).
ffi::Error MarkovImpl(ffi::Buffer<ffi::F32> neglog, ffi::Buffer<ffi::F32> fixed, ffi::Buffer<ffi::F32> log_init,
                      ffi::Buffer<ffi::F32> log_kernel, ffi::Buffer<ffi::U32> keys, int64_t K,
                      ffi::Span<const double> params, ffi::ResultBuffer<ffi::S32> parent, ffi::ResultBuffer<ffi::S32> depth,
                      ffi::ResultBuffer<ffi::F32> logp, ffi::ResultBuffer<ffi::S32> rank,
                      ffi::ResultBuffer<ffi::S32> state, ffi::ResultBuffer<ffi::U32> key) {
  auto kn = log_kernel.dimensions();
  auto fd = fixed.dimensions();
  auto kd = keys.dimensions();
  auto od = logp->dimensions();
  if (params.size() % 6 != 0 || kn.size() != 3 || fd.size() != 2 || fd[1] != K || kd.size() < 1 ||
      kd.back() != 2 || od.size() < 1 || K < 1)
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: bad operand shapes");
  States mk;
  mk.S = int64_t(params.size() / 6);
  mk.R = kn[1];
  if (mk.S < 1 || mk.R < 1 || kn[0] != mk.S || kn[2] != mk.S || int64_t(log_init.element_count()) != mk.S)
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: bad Markov operand shapes");
  const double* pr = params.begin();
  for (int64_t s = 0; s < mk.S; s++) {
    const double* q = pr + 6 * s;
    const int64_t kind = int64_t(q[0]), V = int64_t(q[1]), f = int64_t(q[5]);
    Drawn L{};
    if (V < 1) return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: bad state vocabulary");
    if (kind == DRAW_FIXED) {
      if (f < 0 || f >= fd[0]) return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: bad row");
      L.kind = DRAW_FIXED;
      L.V = V;
      L.K = K;
      L.fixed = fixed.typed_data() + f * K;
    } else {
      if (kind == DRAW_ZIPF && int64_t(neglog.element_count()) < V)
        return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: zipf needs its -log(i) table");
      if (!drawn_law(L, neglog, kind, V, K, q[2], q[3], q[4]))
        return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: unknown drawn law");
    }
    mk.laws.push_back(L);
  }
  mk.init.resize(size_t(mk.S));
  cumulative(log_init.typed_data(), mk.S, mk.init.data());
  mk.log_kernel = log_kernel.typed_data();
  const int64_t P = od.back();
  const int64_t B = int64_t(keys.element_count() / 2);
  Drawn L0 = mk.laws[0];
  Out out{parent->typed_data(), depth->typed_data(), rank->typed_data(), state->typed_data(), logp->typed_data(),
          key->typed_data()};
  search_drawn(L0, &mk, keys.typed_data(), B, P, out);
  return ffi::Error::Success();
}

// The rows (K largest log-probabilities, decreasing) that the drawn search gives nodes with these draw keys [B, 2]:
// the node law itself (tests, benchmarks).
ffi::Error DrawRowsImpl(ffi::Buffer<ffi::F32> table, ffi::Buffer<ffi::U32> keys, int64_t kind, int64_t V, int64_t K,
                        double a, double b, double scale, ffi::ResultBuffer<ffi::F32> rows) {
  auto kd = keys.dimensions();
  if (kd.size() < 1 || kd.back() != 2 || V < 1 || K < 1 || int64_t(rows->element_count()) != int64_t(keys.element_count() / 2) * K)
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: bad operand shapes");
  if (kind == DRAW_ZIPF && int64_t(table.element_count()) < V)
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: zipf needs its -log(i) table");
  Drawn L{};
  if (!drawn_law(L, table, kind, V, K, a, b, scale))
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: unknown drawn law");
  RowBuf rb(V, K);
  const uint32_t* k = keys.typed_data();
  float* out = rows->typed_data();
  for (int64_t i = 0; i < int64_t(keys.element_count() / 2); i++) {
    int32_t held;
    draw_row(L, k[2 * i], k[2 * i + 1], rb, out + i * K, K, &held);
    std::sort(out + i * K, out + (i + 1) * K, std::greater<float>());
  }
  return ffi::Error::Success();
}

ffi::Error OracleImpl(ffi::Buffer<ffi::F32> table, ffi::Buffer<ffi::U32> keys, int64_t init_kind,
                      int64_t child_kind, int64_t row_kind, int64_t n_init, int64_t n_hash,
                      ffi::ResultBuffer<ffi::S32> parent, ffi::ResultBuffer<ffi::S32> depth,
                      ffi::ResultBuffer<ffi::F32> logp, ffi::ResultBuffer<ffi::S32> rank,
                      ffi::ResultBuffer<ffi::S32> state, ffi::ResultBuffer<ffi::U32> key) {
  auto td = table.dimensions();
  auto kd = keys.dimensions();
  auto od = logp->dimensions();
  if (td.size() != 2 || kd.size() < 1 || kd.back() != 2 || od.size() < 1)
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: bad operand shapes");
  const int64_t P = od.back();
  const int64_t B = int64_t(keys.element_count() / 2);
  Law law{table.typed_data(), td[1], int32_t(init_kind), int32_t(child_kind), int32_t(row_kind),
          uint32_t(n_init), uint32_t(n_hash), uint32_t(td[0])};
  if (law.row_kind == ROW_RANDINT && (law.child_kind != CHILD_ZERO || law.n_rows == 0))
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: unsupported law program");
  if (law.child_kind == CHILD_HASH && law.n_hash == 0)
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "brwsim native oracle: empty state space");
  Out out{parent->typed_data(), depth->typed_data(), rank->typed_data(), state->typed_data(), logp->typed_data(),
          key->typed_data()};
  search_all(law, keys.typed_data(), B, P, out);
  return ffi::Error::Success();
}

}  // namespace

// the outputs of a tree search (parent, depth, log P, rank, state, key words) after a binding's arguments
template <typename Binding>
static auto TreeOutputs(Binding binding) {
  return std::move(binding).template Ret<ffi::Buffer<ffi::S32>>()
      .template Ret<ffi::Buffer<ffi::S32>>()
      .template Ret<ffi::Buffer<ffi::F32>>()
      .template Ret<ffi::Buffer<ffi::S32>>()
      .template Ret<ffi::Buffer<ffi::S32>>()
      .template Ret<ffi::Buffer<ffi::U32>>();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(BrwsimOracle, OracleImpl,
                              TreeOutputs(ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::U32>>()
                                  .Attr<int64_t>("init_kind")
                                  .Attr<int64_t>("child_kind")
                                  .Attr<int64_t>("row_kind")
                                  .Attr<int64_t>("n_init")
                                  .Attr<int64_t>("n_hash")));

XLA_FFI_DEFINE_HANDLER_SYMBOL(BrwsimDrawn, DrawnImpl,
                              TreeOutputs(ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::U32>>()
                                  .Attr<int64_t>("kind")
                                  .Attr<int64_t>("V")
                                  .Attr<int64_t>("K")
                                  .Attr<double>("a")
                                  .Attr<double>("b")
                                  .Attr<double>("scale")));

XLA_FFI_DEFINE_HANDLER_SYMBOL(BrwsimDrawRows, DrawRowsImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::U32>>()
                                  .Attr<int64_t>("kind")
                                  .Attr<int64_t>("V")
                                  .Attr<int64_t>("K")
                                  .Attr<double>("a")
                                  .Attr<double>("b")
                                  .Attr<double>("scale")
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(BrwsimMarkov, MarkovImpl,
                              TreeOutputs(ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::U32>>()
                                  .Attr<int64_t>("K")
                                  .Attr<ffi::Span<const double>>("params")));
