// The native oracle's search alone (no JAX), one core, against the C heap (reference_oracle.c), on a
// table law like the benchmark's (V = 64, 1024 rows of sorted Dirichlet(0.1) log-probs): ns per node of
// each by thread CPU time, best of five. The design choices in benchmarks/README.md ("The native
// kernel") were measured with it. From the repository root:
//
//   gcc -O3 -march=native -c benchmarks/reference_oracle.c -o /tmp/ref.o
//   g++ -O3 -march=native -std=c++17 -w -DPLIST=16,64,256,1024,4096 \
//       -I "$(python -c 'import jax; print(jax.ffi.include_dir())')" benchmarks/native_search.cc /tmp/ref.o \
//       -o /tmp/native_search && taskset -c 0 /tmp/native_search
//
// POOL=1 times a pool-like law instead (rows by randint from the node keys). -DFLATMAX=n, -DFLATB=n
// (vectors of eight trees the flat search takes together) and -DGHEAP=n change the kernel's frontier
// threshold, its flat groups and its heap trees in lock step.
#include "../brwsim/data/oracle_native.cc"
#include <cstdio>
#include <ctime>
#include <random>
extern "C" int oracle_table(const float *rows, int32_t n_rows, int32_t V, int32_t K, const int32_t *roots, int64_t n_trees,
                 int32_t P, float *out_lp, int32_t *out_par, int32_t *out_rank);
static double now() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char** argv) {
  int V = 64, N = 1024;
  std::mt19937 g(1);
  std::gamma_distribution<double> ga(0.1);
  std::vector<float> tab(N * V);
  for (int i = 0; i < N; i++) {
    std::vector<double> x(V); double s = 0;
    for (auto& v : x) { v = ga(g) + 1e-300; s += v; }
    for (auto& v : x) v = std::log(v / s);
    std::sort(x.begin(), x.end(), std::greater<double>());
    for (int j = 0; j < V; j++) tab[i * V + j] = float(x[j]);
  }
  int Ps[] = {PLIST};
  for (int P : Ps) {
    int64_t B = std::max<int64_t>(64, 800000 / P);
    int K = std::min(P, V);
    std::vector<float> t2(N * K);
    for (int i = 0; i < N; i++) for (int j = 0; j < K; j++) t2[i * K + j] = tab[i * V + j];
    std::vector<uint32_t> keys(2 * B);
    for (auto& k : keys) k = g();
    std::vector<int32_t> roots(B);
    std::vector<int32_t> par(B * P), dep(B * P), rk(B * P), st(B * P);
    std::vector<float> lp(B * P);
    std::vector<uint32_t> ko(2 * B * P);
    Law law{t2.data(), K, INIT_RANDINT, CHILD_HASH, ROW_STATE, uint32_t(N), uint32_t(N), uint32_t(N)};
    if (getenv("POOL")) law = Law{t2.data(), K, INIT_ZERO, CHILD_ZERO, ROW_RANDINT, 0, 0, uint32_t(N)};
    Out out{par.data(), dep.data(), rk.data(), st.data(), lp.data(), ko.data()};
    double bn = 1e9, bc = 1e9;
    for (int rep = 0; rep < 5; rep++) {
      double t0 = now();
      search_all(law, keys.data(), B, P, out);
      double t1 = now();
      for (int64_t i = 0; i < B; i++) roots[i] = keys[2*i] % N;
      double t2_ = now();
      oracle_table(tab.data(), N, V, K, roots.data(), B, P, lp.data(), par.data(), rk.data());
      double t3 = now();
      bn = std::min(bn, t1 - t0); bc = std::min(bc, t3 - t2_);
    }
    printf("P=%5d native %6.1f ns/node  C %6.1f ns/node  C/native %.2f\n", P, bn / (B * P) * 1e9, bc / (B * P) * 1e9, bc / bn);
  }
}
