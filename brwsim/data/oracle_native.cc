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
  int32_t pad;
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

XLA_FFI_DEFINE_HANDLER_SYMBOL(BrwsimOracle, OracleImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::U32>>()
                                  .Attr<int64_t>("init_kind")
                                  .Attr<int64_t>("child_kind")
                                  .Attr<int64_t>("row_kind")
                                  .Attr<int64_t>("n_init")
                                  .Attr<int64_t>("n_hash")
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::U32>>());
