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
#include <cmath>
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

  inline void push(uint64_t x) {
    int64_t i = ++n;
    while (i > 1) {
      uint64_t p = h[i >> 1];
      if (p >= x) break;
      h[i] = p;
      i >>= 1;
    }
    h[i] = x;
  }

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
    while (i > 1) {
      uint64_t p = h[i >> 1];
      if (p >= x) break;
      h[i] = p;
      i >>= 1;
    }
    h[i] = x;
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

// Search LANES trees t0 .. t0 + LANES - 1 (lanes past n_active compute a copy of lane 0, not written).
static void search(const Law& law, const uint32_t* tree_keys, int64_t t0, int n_active, int64_t P,
                   std::vector<Rec>& recs, std::vector<uint64_t>& heaps, const Out& out) {
  const int64_t S = P + 1, K = law.K;
  const float* tab = law.table;
  Rec* rec[LANES];
  Heap heap[LANES];
  uint32_t k0[LANES], k1[LANES], s0k0[LANES], s0k1[LANES];
  int32_t st[LANES], row[LANES];
  for (int l = 0; l < LANES; l++) {
    int64_t t = t0 + (l < n_active ? l : 0);
    k0[l] = tree_keys[2 * t];
    k1[l] = tree_keys[2 * t + 1];
    rec[l] = recs.data() + l * S;
    heap[l] = Heap{heaps.data() + l * (S + 1), 0};
  }
  if (law.init_kind == INIT_RANDINT) {
    fold_in_const(k0, k1, 1, s0k0, s0k1);
    randint(s0k0, s0k1, law.n_init, st);
  } else {
    for (int l = 0; l < LANES; l++) st[l] = 0;
  }
  node_rows(law, k0, k1, st, row);
  for (int l = 0; l < LANES; l++) {
    rec[l][0] = Rec{0.0f, row[l], 0, st[l], 0, k0[l], k1[l], 0};
    float c = tab[row[l] * K];
    if (c != -INFINITY) heap[l].push(order_key(c, 0));
  }
  uint32_t rank[LANES], par[LANES];
  float m[LANES];
  for (int64_t n = 1; n <= P; n++) {
    // 1. every lane takes its largest candidate and puts its parent's next child in its place
    for (int l = 0; l < LANES; l++) {
      Heap& hp = heap[l];
      uint32_t j = 0;
      float v = -INFINITY;
      if (hp.n > 0) {
        uint64_t top = hp.h[1];
        j = slot_of(top);
        v = value_of(top);
      }
      Rec& p = rec[l][j];
      int32_t r = p.ptr;
      p.ptr = r + 1;
      float nxt = (r + 1 < K) ? tab[p.row * K + r + 1] : -INFINITY;
      float cand = p.lp + nxt;
      if (hp.n > 0) {
        if (cand != -INFINITY)
          hp.replace_top(order_key(cand, j));
        else
          hp.pop();
      }
      m[l] = v;
      par[l] = j;
      rank[l] = uint32_t(r);
      k0[l] = p.k0;
      k1[l] = p.k1;
      st[l] = p.state;
    }
    // 2. the new nodes' keys, states and rows (vectorised over the lanes)
    uint32_t tag[LANES], c0[LANES], c1[LANES];
    for (int l = 0; l < LANES; l++) tag[l] = 2u + rank[l];
    fold_in(k0, k1, tag, c0, c1);
    int32_t sn[LANES];
    if (law.child_kind == CHILD_HASH) {
      for (int l = 0; l < LANES; l++) sn[l] = hash_state(uint32_t(st[l]), rank[l], FastMod(law.n_hash));
    } else {
      for (int l = 0; l < LANES; l++) sn[l] = 0;
    }
    node_rows(law, c0, c1, sn, row);
    // 3. record the new nodes; their best children enter the frontier
    for (int l = 0; l < n_active; l++) {
      Rec& p = rec[l][par[l]];
      int32_t depth = p.depth + 1;
      rec[l][n] = Rec{m[l], row[l], 0, sn[l], depth, c0[l], c1[l], 0};
      float c = m[l] + tab[row[l] * K];
      if (c != -INFINITY) heap[l].push(order_key(c, uint32_t(n)));
      int64_t o = (t0 + l) * P + (n - 1);
      out.parent[o] = int32_t(par[l]) - 1;
      out.depth[o] = depth;
      out.logp[o] = m[l];
      out.rank[o] = int32_t(rank[l]);
      out.state[o] = sn[l];
      out.key[2 * o] = c0[l];
      out.key[2 * o + 1] = c1[l];
    }
  }
}

// -- laws whose search needs no node key (fixed, the table law): one tree at a time, keys after --

struct alignas(16) Rec16 {
  float lp;
  int32_t row, ptr, depth;
};

// The search of one tree whose root has row `row0` (= its state for the table law): writes parent,
// depth, log P, rank and state of its P nodes; their keys come after (node_keys).
static void search_keyless(const Law& law, int32_t row0, int64_t P, Rec16* rec, uint64_t* hbuf, int64_t o,
                           const Out& out) {
  const int64_t K = law.K;
  const float* tab = law.table;
  const bool hashed = law.child_kind == CHILD_HASH;
  const FastMod mod(law.n_hash);
  Heap hp{hbuf, 0};
  rec[0] = Rec16{0.0f, row0, 0, 0};
  float c0 = tab[int64_t(row0) * K];
  if (c0 != -INFINITY) hp.push(order_key(c0, 0));
  for (int64_t n = 1; n <= P; n++) {
    uint32_t j = 0;
    float m = -INFINITY;
    if (hp.n > 0) {
      uint64_t top = hp.h[1];
      j = slot_of(top);
      m = value_of(top);
    }
    Rec16& p = rec[j];
    int32_t r = p.ptr;
    p.ptr = r + 1;
    float nxt = (r + 1 < K) ? tab[int64_t(p.row) * K + r + 1] : -INFINITY;
    float cand = p.lp + nxt;
    if (hp.n > 0) {
      if (cand != -INFINITY)
        hp.replace_top(order_key(cand, j));
      else
        hp.pop();
    }
    int32_t row = hashed ? hash_state(uint32_t(p.row), uint32_t(r), mod) : 0;
    int32_t depth = p.depth + 1;
    rec[n] = Rec16{m, row, 0, depth};
    float c = m + tab[int64_t(row) * K];
    if (c != -INFINITY) hp.push(order_key(c, uint32_t(n)));
    int64_t i = o + n - 1;
    out.parent[i] = int32_t(j) - 1;
    out.depth[i] = depth;
    out.logp[i] = m;
    out.rank[i] = r;
    out.state[i] = row;
  }
}

// The node keys of trees t0 .. t0 + n_active - 1 from their parents and ranks (LANES trees at once):
// key(node) = fold_in(key(parent), 2 + rank), the root's key being the tree key.
static void node_keys(const uint32_t* tree_keys, int64_t t0, int n_active, int64_t P, const Out& out) {
  uint32_t p0[LANES], p1[LANES], tag[LANES], c0[LANES], c1[LANES];
  for (int64_t i = 0; i < P; i++) {
    for (int l = 0; l < LANES; l++) {
      int64_t t = t0 + (l < n_active ? l : 0), o = t * P;
      int32_t par = out.parent[o + i];
      const uint32_t* k = par < 0 ? tree_keys + 2 * t : out.key + 2 * (o + par);
      p0[l] = k[0];
      p1[l] = k[1];
      tag[l] = 2u + uint32_t(out.rank[o + i]);
    }
    fold_in(p0, p1, tag, c0, c1);
    for (int l = 0; l < n_active; l++) {
      int64_t o = (t0 + l) * P + i;
      out.key[2 * o] = c0[l];
      out.key[2 * o + 1] = c1[l];
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

static void search_all(const Law& law, const uint32_t* tree_keys, int64_t B, int64_t P, const Out& out) {
  if (keyless(law)) {
    std::vector<Rec16> rec(size_t(P + 1));
    std::vector<uint64_t> heap(size_t(P + 2));
    int32_t row[LANES];
    for (int64_t t0 = 0; t0 < B; t0 += LANES) {
      int n_active = int(B - t0 < LANES ? B - t0 : LANES);
      root_rows(law, tree_keys, t0, n_active, row);
      for (int l = 0; l < n_active; l++) search_keyless(law, row[l], P, rec.data(), heap.data(), (t0 + l) * P, out);
      node_keys(tree_keys, t0, n_active, P, out);
    }
    return;
  }
  std::vector<Rec> recs(size_t(LANES) * size_t(P + 1));
  std::vector<uint64_t> heaps(size_t(LANES) * size_t(P + 2));
  for (int64_t t0 = 0; t0 < B; t0 += LANES) {
    int n_active = int(B - t0 < LANES ? B - t0 : LANES);
    search(law, tree_keys, t0, n_active, P, recs, heaps, out);
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
