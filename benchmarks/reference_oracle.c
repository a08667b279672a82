/* The best-first oracle of the benchmark's table law, compiled: what a user who
 * needed speed would write by hand. One tree at a time, a binary max-heap of
 * frontier candidates (path log-prob of a taken node's next child, keyed by the
 * taken node's slot for ties: the earliest-taken parent first), float32 sums as
 * in brwsim. Same inputs and outputs as brwsim.testing.oracle_heapq.
 *
 * Build (benchmarks/reference_c.py does it once, into the user cache):
 *     cc -O3 -march=native -shared -fPIC reference_oracle.c -o reference_oracle.so
 */
#include <stdint.h>
#include <stdlib.h>
#include <math.h>

typedef struct { float key; int32_t slot; } cand;

/* a before b: larger key first, then the smaller slot (the heap's total order) */
static inline int before(cand a, cand b) { return a.key > b.key || (a.key == b.key && a.slot < b.slot); }

static inline void push(cand *h, int *n, cand c) {
    int i = (*n)++;
    while (i > 0) {
        int p = (i - 1) >> 1;
        if (!before(c, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static inline cand pop(cand *h, int *n) {
    cand top = h[0], last = h[--(*n)];
    int i = 0, m = *n;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, b = i;
        cand best = last;
        if (l < m && before(h[l], best)) { b = l; best = h[l]; }
        if (r < m && before(h[r], best)) { b = r; best = h[r]; }
        if (b == i) break;
        h[i] = h[b];
        i = b;
    }
    if (m > 0) h[i] = last;
    return top;
}

static inline int32_t child_row(uint32_t parent_row, uint32_t rank, uint32_t n_rows) {
    uint32_t h = parent_row * 0x9E3779B1u + rank * 0x85EBCA77u + 0x165667B1u;
    h ^= h >> 15;
    h *= 0xC2B2AE3Du;
    h ^= h >> 13;
    return (int32_t)(h % n_rows);
}

/* Trees [0, n_trees): root rows roots[t]; rows is [n_rows, V] float32, each row sorted
 * decreasing; K <= V children per node are considered. Writes the P taken nodes of
 * each tree in order: out_lp (float32 path log-prob), out_par (slot of the parent
 * minus one: -1 is the root), out_rank. Returns 0, or -1 if out of memory. */
int oracle_table(const float *rows, int32_t n_rows, int32_t V, int32_t K, const int32_t *roots, int64_t n_trees,
                 int32_t P, float *out_lp, int32_t *out_par, int32_t *out_rank) {
    float *slot_lp = malloc(sizeof(float) * (P + 1));
    int32_t *slot_row = malloc(sizeof(int32_t) * (P + 1));
    int32_t *ptr = malloc(sizeof(int32_t) * (P + 1));
    cand *heap = malloc(sizeof(cand) * (P + 2));
    if (!slot_lp || !slot_row || !ptr || !heap) {
        free(slot_lp); free(slot_row); free(ptr); free(heap);
        return -1;
    }
    for (int64_t t = 0; t < n_trees; t++) {
        float *lp_out = out_lp + t * P;
        int32_t *par_out = out_par + t * P, *rank_out = out_rank + t * P;
        int n = 0;
        slot_lp[0] = 0.0f;
        slot_row[0] = roots[t];
        ptr[0] = 0;
        push(heap, &n, (cand){rows[(int64_t)roots[t] * V], 0});
        for (int32_t i = 0; i < P; i++) {
            if (n == 0) { lp_out[i] = -INFINITY; par_out[i] = -1; rank_out[i] = 0; continue; }
            cand c = pop(heap, &n);
            int32_t j = c.slot, r = ptr[j]++;
            if (r + 1 < K) push(heap, &n, (cand){slot_lp[j] + rows[(int64_t)slot_row[j] * V + r + 1], j});
            int32_t row = child_row((uint32_t)slot_row[j], (uint32_t)r, (uint32_t)n_rows);
            slot_lp[i + 1] = c.key;
            slot_row[i + 1] = row;
            ptr[i + 1] = 0;
            push(heap, &n, (cand){c.key + rows[(int64_t)row * V], i + 1});
            lp_out[i] = c.key;
            par_out[i] = j - 1;
            rank_out[i] = r;
        }
    }
    free(slot_lp); free(slot_row); free(ptr); free(heap);
    return 0;
}
