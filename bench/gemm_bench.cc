// `cputrain-numa bench gemm`: GFLOP/s of the matrix products of a training step, per replica
// group, each implementation against the measured peak of the instruction it runs (bench/peak.h:
// the fp32 FMA loop, VDPBF16PS, AMX's TDPBF16PS), and the kernel choices made by measurement
// (docs/bf16.md). fp32 rows:
//
//   ours         what training runs: one single-threaded OpenBLAS call per pool worker on its
//                slice of the output (kernels::MatmulForward / MatmulBackward on the group's
//                pinned pool; see src/kernels/matmul.cc)
//   openblas-mt  one OpenBLAS call over the same number of threads, OpenBLAS threading itself
//                (openblas_set_num_threads(T), then back to 1), called from a thread bound to the
//                group's CPUs. OpenBLAS's own threads are created by OpenBLAS (at load time, from
//                the unpinned main thread) and are not pinned by us.
//   own-avx2     our own packed 6x16 AVX2/FMA kernel (kernels/own_sgemm.h), single-threaded per
//                worker on the same slices as `ours`
//   onednn-fp32  (builds with oneDNN) oneDNN's fp32 matmul (kernels/onednn.h), one
//                single-threaded call per worker on the same slices
//
// bf16 rows (bf16 operands, fp32 accumulation and output), on the same slices; the operands are
// converted to bf16 before timing (a training step converts each activation once; the conversion
// is a memory pass of N x C, not a product):
//
//   own-bf16     our VDPBF16PS kernel (train.bf16_kernel: vdpbf16ps), % of the VDPBF16PS peak
//   own-amx      our AMX kernel on the tiles (train.bf16_kernel: amx), % of the AMX peak; where
//                AMX is absent or refused the row and the AMX peak say "not available" and why
//   onednn-bf16  oneDNN's bf16 matmul, % of the AMX peak where AMX runs (oneDNN picks its AMX
//                kernels there), else of the VDPBF16PS peak
//   onednn-bf16-mt  the same as one call that oneDNN splits over T OpenMP threads.
// The tile model (train.bf16_kernel: tile-model) is a correctness backend: tested, not timed.
//
// Shapes of a block, for N = (B/G) * T rows of a group: qkv C -> 3C, attproj C -> C, fc C -> 4C,
// fcproj 4C -> C, and the LM head C -> V (tied to wte, output row stride Vp). For each, the three
// products of a training step, as sgemm M x N x K:
//   fwd         out (N, OC) = inp (N, C) @ W (OC, C)^T          M = N,  N = OC, K = C
//   bwd_input   dinp (N, C) = dout (N, OC) @ W (OC, C)          M = N,  N = C,  K = OC
//   bwd_weight  dW (OC, C) = dout (N, OC)^T @ inp (N, C)        M = OC, N = C,  K = N
// FLOPs = 2 M N K each. Biases are left out (MatmulForward with a null bias; the bias row copy and
// dbias column sums are memory passes of N x OC, not products). kernels::MatmulBackward computes
// dinp and dW in one call; bwd_weight is timed through it with dinp null, and bwd_input, which it
// does not expose alone, with the same partition replicated here.
//
// Timing: buffers on the group's NUMA node, first touched by its pool; per (shape, product) one
// warm-up call of each implementation, then rounds of one call of each in turn (so a disturbance
// hits them all alike) until each had ~0.5 s (3..50 rounds; --quick ~0.05 s, 2..5), the median
// reported (and the best, in the records). Groups are measured one at a time. "per step" weights
// each shape by its use in one step (L x each block shape + the LM head once) and gives total FLOPs
// / total time.
#include <cblas.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "alloc/numa_alloc.h"
#include "bench/attention_gemm.h"
#include "bench/bench.h"
#include "bench/models.h"
#include "bench/peak.h"
#include "common/error.h"
#include "common/log.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/onednn.h"
#include "runtime/worker_pool.h"
#include "topology/binding.h"
#include "topology/placement.h"
#include "topology/topology.h"

extern "C" {
void openblas_set_num_threads(int num_threads);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

namespace cputrain::bench {
namespace {

enum class Product { kFwd, kBwdInput, kBwdWeight };
constexpr Product kProducts[] = {Product::kFwd, Product::kBwdInput, Product::kBwdWeight};
const char* ProductName(Product p) {
  switch (p) {
    case Product::kFwd:
      return "fwd";
    case Product::kBwdInput:
      return "bwd_input";
    case Product::kBwdWeight:
      return "bwd_weight";
  }
  return "?";
}

// Every implementation, in the order the rows print: the fp32 ones, then the bf16 ones.
enum class Impl { kOurs, kOpenblasMt, kOwn, kOnednnF32, kOwnBf16, kAmx, kBf16, kBf16Mt };
bool IsBf16(Impl i) { return i >= Impl::kOwnBf16; }
const char* ImplName(Impl i) {
  switch (i) {
    case Impl::kOurs:
      return "ours";
    case Impl::kOpenblasMt:
      return "openblas-mt";
    case Impl::kOwn:
      return "own-avx2";
    case Impl::kOnednnF32:
      return "onednn-fp32";
    case Impl::kOwnBf16:
      return "own-bf16";
    case Impl::kAmx:
      return "own-amx";
    case Impl::kBf16:
      return "onednn-bf16";
    case Impl::kBf16Mt:
      return "onednn-bf16-mt";
  }
  return "?";
}

struct Shape {
  std::string name;
  int C = 0, OC = 0, ld = 0;  // in, out channels; output row stride
  int per_step = 1;           // uses per training step
};

// The products of one training step's forward pass (model/transformer.h): qkv (Q = 3C without
// grouped-query attention), attention output, MLP input (F, or 2F gate|up for SwiGLU), MLP
// output, LM head.
std::vector<Shape> ShapesOf(const ModelPreset& m) {
  const model::Shape& s = m.shape;
  const int C = s.C, Q = s.qkv_width(), F = s.ffn(), L = s.L;
  const int Fin = s.mlp_in_width();
  return {{"qkv", C, Q, Q, L},
          {"attproj", C, C, C, L},
          {"fc", C, Fin, Fin, L},
          {"fcproj", F, C, C, L},
          {"lm_head", C, s.V, s.Vp, 1}};
}

// sgemm dimensions of a product.
void Dims(Product p, std::size_t N, const Shape& s, std::size_t* M, std::size_t* Nn,
          std::size_t* K) {
  switch (p) {
    case Product::kFwd:
      *M = N, *Nn = static_cast<std::size_t>(s.OC), *K = static_cast<std::size_t>(s.C);
      return;
    case Product::kBwdInput:
      *M = N, *Nn = static_cast<std::size_t>(s.C), *K = static_cast<std::size_t>(s.OC);
      return;
    case Product::kBwdWeight:
      *M = static_cast<std::size_t>(s.OC), *Nn = static_cast<std::size_t>(s.C), *K = N;
      return;
  }
}

int I(std::size_t v) { return static_cast<int>(v); }

// A float buffer on a NUMA node.
struct Buffer {
  Buffer(int node, std::size_t n)
      : p(static_cast<float*>(alloc::AllocateOnNode(node, n * sizeof(float)))), n(n) {}
  uint16_t* bf16() { return reinterpret_cast<uint16_t*>(p); }  // for a bf16 copy of n/2+ values
  ~Buffer() { alloc::FreeOnNode(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* p;
  std::size_t n;
};

// The operands of one shape for a group.
struct Operands {
  Operands(int node, std::size_t N, const Shape& s)
      : inp(node, N * s.C),
        w(node, static_cast<std::size_t>(s.OC) * s.C),
        out(node, N * s.ld),
        dout(node, N * s.ld),
        dinp(node, N * s.C),
        dw(node, static_cast<std::size_t>(s.OC) * s.C),
        ref(node, std::max({N * s.ld, N * s.C, static_cast<std::size_t>(s.OC) * s.C})),
        inp16(node, (inp.n + 1) / 2),
        w16(node, (w.n + 1) / 2),
        dout16(node, (dout.n + 1) / 2) {}
  Buffer inp, w, out, dout, dinp, dw, ref;
  Buffer inp16, w16, dout16;  // bf16 copies of inp, w, dout (in float-sized buffers)
};

// Small, varied, finite values (|v| <= 0.05): no overflow, no denormals.
void Fill(WorkerPool& pool, float* p, std::size_t n, uint32_t salt) {
  pool.ParallelFor(n, [&](std::size_t lo, std::size_t hi, int) {
    for (std::size_t i = lo; i < hi; ++i) {
      const uint32_t h = static_cast<uint32_t>(i) * 2654435761u + salt * 40503u;
      p[i] = (static_cast<float>(h >> 8 & 1023) / 1023.0f - 0.5f) * 0.1f;
    }
  });
}

// One implementation's timing of one product of one shape (GemmSuite::MeasureProduct).
struct GemmRow {
  const Shape* shape = nullptr;
  Product product = Product::kFwd;
  Impl impl = Impl::kOurs;
  std::size_t M = 0, N = 0, K = 0;
  double flops = 0;              // 2 M N K
  double seconds = 0, best = 0;  // median and best of the timed calls
  std::size_t reps = 0;          // timed calls
  double peak = 0;               // the peak its % is of (the group's FMA or bf16 peak)
  double err = 0;                // max relative difference from ours' result
  double gflops() const { return flops / seconds / 1e9; }
};

// One group's run: its pool, peaks, the implementations it times and how long each runs.
struct GemmGroup {
  int g = 0;
  const topo::Group* pg = nullptr;
  int node = 0;
  WorkerPool* pool = nullptr;
  topo::Binder* binder = nullptr;
  std::vector<int> old_binding;  // the calling thread's binding, given back after openblas-mt
  PeakResult peak;
  double bf16_peak = 0, amx_peak = 0;  // the group's VDPBF16PS and AMX peaks (0: none here)
  std::vector<Impl> impls;
  double target = 0;  // seconds each implementation runs per product
  int min_reps = 0, max_reps = 0;
  // The peak an implementation's % is of: the fp32 FMA loop's, VDPBF16PS's, or AMX's (our AMX
  // kernel, and oneDNN's bf16 matmul where AMX runs: it picks its AMX kernels by itself).
  double PeakOf(Impl impl) const {
    if (!IsBf16(impl)) return peak.group();
    if (impl == Impl::kAmx || ((impl == Impl::kBf16 || impl == Impl::kBf16Mt) && amx_peak > 0)) {
      return amx_peak;
    }
    return bf16_peak;
  }
};

class GemmSuite : public Suite {
 public:
  std::string name() const override { return "gemm"; }
  std::string description() const override {
    return "GFLOP/s of the model's matrix products per group vs the measured FMA peak; "
           "partitioned OpenBLAS (ours) vs OpenBLAS threading vs an own AVX2 kernel";
  }
  void AddOptions(CLI::App* cmd) override {
    cmd->add_option(
        "--model", models_,
        "model whose shapes to run (repeatable): " + ModelNames() + " (default: config)");
  }
  void Run(const BenchContext& ctx, SuiteRecords* report) override;

 private:
  // Runs `product` with `impl` once.
  void Call(Impl impl, Product product, WorkerPool& pool, Operands& o, std::size_t N,
            const Shape& s);
  float* Output(Product product, Operands& o) {
    return product == Product::kFwd ? o.out.p : product == Product::kBwdInput ? o.dinp.p : o.dw.p;
  }

  void ReportAttention(WorkerPool& pool, const PeakResult& peak, const ModelPreset& m, int G, int g,
                       double target, SuiteRecords* report);

  // Peaks printed and recorded; gr->impls and gr->bf16_peak set from what this CPU runs.
  static void Peaks(GemmGroup* gr, SuiteRecords* report);
  // One model's shapes on the group: each product measured, recorded and printed, then the
  // step's summary and the attention products.
  void RunModel(const GemmGroup& gr, const std::string& mname, const BenchContext& ctx,
                SuiteRecords* report);
  // Every implementation of the group on one product: warm-up (result checked against ours),
  // then interleaved timed rounds.
  std::vector<GemmRow> MeasureProduct(const GemmGroup& gr, Product p, Operands& o, std::size_t N,
                                      const Shape& s);
  // One call of impl, timed (openblas-mt and onednn-bf16-mt from this thread, bound).
  double Time(const GemmGroup& gr, Impl impl, Product p, Operands& o, std::size_t N,
              const Shape& s);

  std::vector<std::string> models_;
  kernels::OnednnGemm onednn_;
  int groups_ = 1;  // the placement's groups (the batch splits over them)
};

// The attention's batched products (bench/attention_gemm.h): fp32 sgemm vs oneDNN bf16.
void GemmSuite::ReportAttention(WorkerPool& pool, const PeakResult& peak, const ModelPreset& m,
                                int G, int g, double target, SuiteRecords* report) {
  const int B = m.B / G;
  // The bf16 column needs oneDNN (optional: kernels/onednn.h).
  const bool bf16 = peak.bf16 && kernels::OnednnGemm::Available();
  const std::vector<AttentionProductTiming> rows =
      TimeAttentionProducts(pool, bf16 ? &onednn_ : nullptr, B, m.T, m.shape.C, m.shape.NH, target);
  std::printf("  attention products (one GEMM per (b, head), %d x %d of them, full T x T):\n", B,
              m.shape.NH);
  double s32 = 0, s16 = 0, flops = 0;
  for (const AttentionProductTiming& r : rows) {
    const double g32 = r.flops / r.fp32_seconds / 1e9;
    const double g16 = bf16 ? r.flops / r.bf16_seconds / 1e9 : 0;
    std::printf(
        "  %-8s %-10s %6d %6d %6d | fp32 %7.1f %5.0f%% | bf16 %7.1f %5.0f%% | %5.2fx | err %.1e\n",
        "attn", r.product.c_str(), r.M, r.N, r.K, g32, 100 * g32 / peak.group(), g16,
        bf16 ? 100 * g16 / peak.group_bf16_peak() : 0.0,
        bf16 ? r.fp32_seconds / r.bf16_seconds : 0.0, r.bf16_rel_err);
    s32 += r.fp32_seconds * m.shape.L;
    s16 += r.bf16_seconds * m.shape.L;
    flops += r.flops * m.shape.L;
    report->Add({{"kind", "attention_gemm"},
                 {"model", m.name},
                 {"group", g},
                 {"threads", pool.size()},
                 {"product", r.product},
                 {"M", r.M},
                 {"N", r.N},
                 {"K", r.K},
                 {"per_step", m.shape.L},
                 {"fp32_seconds", r.fp32_seconds},
                 {"fp32_gflops", g32},
                 {"bf16_seconds", r.bf16_seconds},
                 {"bf16_gflops", g16},
                 {"bf16_rel_err_vs_fp32", r.bf16_rel_err}});
  }
  std::printf(
      "    per step (%d x 6 products, %.1f GFLOP): fp32 sgemm %.1f ms, bf16 oneDNN %.1f ms\n",
      m.shape.L, flops / 1e9, s32 * 1e3, s16 * 1e3);
}

// One product on the partition training uses (kernels/matmul_split.h: MatmulForward splits OC
// if OC >= N, else N; MatmulBackward's dinp N if N >= C, else C; dweight OC), one gemm(M, N, K,
// A, ta, lda, B, tb, ldb, C, ldc) per worker of `pool` on its slice; pool null: the whole product
// as one call on this thread. inp (N,C), w (OC,C) and dout (N,ld) are the operands as E (float,
// or their bf16 copies).
template <class E, class Gemm>
void Partitioned(Product product, WorkerPool* pool, std::size_t N, const Shape& s, const E* inp,
                 const E* w, const E* dout, Operands& o, Gemm&& gemm) {
  const int C = s.C, OC = s.OC, ld = s.ld, n = I(N);
  const std::size_t uC = static_cast<std::size_t>(C), uOC = static_cast<std::size_t>(OC);
  auto slice = [&](int tid, int nt) {
    std::size_t b = 0, e = 0;
    switch (product) {
      case Product::kFwd: {
        const bool split_cols = uOC >= N;
        kernels::MatmulSlice(split_cols ? uOC : N, nt, tid, &b, &e);
        if (b >= e) return;
        const std::size_t r0 = split_cols ? 0 : b, r1 = split_cols ? N : e;
        const std::size_t c0 = split_cols ? b : 0, c1 = split_cols ? e : uOC;
        return gemm(I(r1 - r0), I(c1 - c0), C, inp + r0 * uC, false, C, w + c0 * uC, true, C,
                    o.out.p + r0 * ld + c0, ld);
      }
      case Product::kBwdInput: {
        const bool split_rows = N >= uC;
        kernels::MatmulSlice(split_rows ? N : uC, nt, tid, &b, &e);
        if (b >= e) return;
        if (split_rows) {
          return gemm(I(e - b), C, OC, dout + b * ld, false, ld, w, false, C, o.dinp.p + b * uC, C);
        }
        return gemm(n, I(e - b), OC, dout, false, ld, w + b, false, C, o.dinp.p + b, C);
      }
      case Product::kBwdWeight: {
        kernels::MatmulSlice(uOC, nt, tid, &b, &e);
        if (b >= e) return;
        return gemm(I(e - b), C, n, dout + b, true, ld, inp, false, C, o.dw.p + b * uC, C);
      }
    }
  };
  if (pool == nullptr) return slice(0, 1);
  pool->ForEachThread([&](int tid) { slice(tid, pool->size()); });
}

void Sgemm(int M, int N, int K, const float* A, bool ta, int lda, const float* B, bool tb, int ldb,
           float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, 1.f, A, lda, B, ldb, 0.f, C, ldc);
}

void GemmSuite::Call(Impl impl, Product product, WorkerPool& pool, Operands& o, std::size_t N,
                     const Shape& s) {
  const int C = s.C, OC = s.OC, ld = s.ld;
  const float *inp = o.inp.p, *w = o.w.p, *dout = o.dout.p;
  const uint16_t *inp16 = o.inp16.bf16(), *w16 = o.w16.bf16(), *dout16 = o.dout16.bf16();
  auto own = [](int M, int Nn, int K, const float* A, bool ta, int lda, const float* B, bool tb,
                int ldb, float* Cm, int ldc) {
    kernels::SgemmOn(kernels::Fp32Kernel::kOwn, ta, tb, M, Nn, K, 1.f, A, lda, B, ldb, 0.f, Cm,
                     ldc);
  };
  auto onednn_f32 = [&](int M, int Nn, int K, const float* A, bool ta, int lda, const float* B,
                        bool tb, int ldb, float* Cm,
                        int ldc) { onednn_.RunF32(M, Nn, K, A, ta, lda, B, tb, ldb, Cm, ldc); };
  auto onednn_bf16 = [&](int M, int Nn, int K, const uint16_t* A, bool ta, int lda,
                         const uint16_t* B, bool tb, int ldb, float* Cm,
                         int ldc) { onednn_.RunBf16(M, Nn, K, A, ta, lda, B, tb, ldb, Cm, ldc); };
  auto kernel = [](kernels::Bf16Kernel k) {
    return [k](int M, int Nn, int K, const uint16_t* A, bool ta, int lda, const uint16_t* B,
               bool tb, int ldb, float* Cm,
               int ldc) { kernels::Bf16GemmOn(k, M, Nn, K, A, ta, lda, B, tb, ldb, Cm, ldc); };
  };
  switch (impl) {
    case Impl::kOurs:  // training's own calls where they exist alone
      if (product == Product::kFwd) {
        return kernels::MatmulForward(pool, o.out.p, inp, w, nullptr, N, C, OC, ld);
      }
      if (product == Product::kBwdWeight) {
        return kernels::MatmulBackward(pool, nullptr, o.dw.p, nullptr, dout, inp, w, N, C, OC, ld);
      }
      return Partitioned(product, &pool, N, s, inp, w, dout, o, Sgemm);
    case Impl::kOpenblasMt:  // one call from this (bound) thread, OpenBLAS threading itself
      return Partitioned(product, nullptr, N, s, inp, w, dout, o, Sgemm);
    case Impl::kOwn:
      return Partitioned(product, &pool, N, s, inp, w, dout, o, own);
    case Impl::kOnednnF32:
      return Partitioned(product, &pool, N, s, inp, w, dout, o, onednn_f32);
    case Impl::kOwnBf16:
      return Partitioned(product, &pool, N, s, inp16, w16, dout16, o,
                         kernel(kernels::Bf16Kernel::kVdpbf16ps));
    case Impl::kAmx:
      return Partitioned(product, &pool, N, s, inp16, w16, dout16, o,
                         kernel(kernels::Bf16Kernel::kAmx));
    case Impl::kBf16:
      return Partitioned(product, &pool, N, s, inp16, w16, dout16, o, onednn_bf16);
    case Impl::kBf16Mt:  // one call that oneDNN splits over its own OpenMP threads
      return Partitioned(product, nullptr, N, s, inp16, w16, dout16, o, onednn_bf16);
  }
}

// max |x - ref| / max |ref| over the product's output.
double RelErr(const float* x, const float* ref, std::size_t rows, std::size_t cols,
              std::size_t ld) {
  double err = 0, mag = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) {
      err = std::max(err, static_cast<double>(std::fabs(x[r * ld + c] - ref[r * ld + c])));
      mag = std::max(mag, static_cast<double>(std::fabs(ref[r * ld + c])));
    }
  }
  return mag > 0 ? err / mag : err;
}

double GemmSuite::Time(const GemmGroup& gr, Impl impl, Product p, Operands& o, std::size_t N,
                       const Shape& s) {
  const bool mt = impl == Impl::kOpenblasMt || impl == Impl::kBf16Mt;
  const int T = gr.pool->size();
  if (mt) {
    gr.binder->BindThisThread(gr.pg->cpus);
    openblas_set_num_threads(impl == Impl::kOpenblasMt ? T : 1);
    kernels::OnednnGemm::SetCallerThreads(impl == Impl::kBf16Mt ? T : 1);
  }
  const double t0 = NowSeconds();
  Call(impl, p, *gr.pool, o, N, s);
  const double t = NowSeconds() - t0;
  if (mt) {
    openblas_set_num_threads(1);
    kernels::OnednnGemm::SetCallerThreads(1);
    if (!gr.old_binding.empty()) gr.binder->BindThisThread(gr.old_binding);
  }
  return t;
}

std::vector<GemmRow> GemmSuite::MeasureProduct(const GemmGroup& gr, Product p, Operands& o,
                                               std::size_t N, const Shape& s) {
  std::size_t M = 0, Nn = 0, K = 0;
  Dims(p, N, s, &M, &Nn, &K);
  const double flops =
      2.0 * static_cast<double>(M) * static_cast<double>(Nn) * static_cast<double>(K);
  const std::size_t out_ld = p == Product::kFwd ? static_cast<std::size_t>(s.ld) : Nn;
  // One warm-up call each (its result checked against ours), then the implementations in turns,
  // one call each per round, so that a disturbance from another process lands on all of them
  // alike rather than on whichever was running then.
  std::vector<GemmRow> rows;
  for (Impl impl : gr.impls) {
    Time(gr, impl, p, o, N, s);
    float* out = Output(p, o);
    GemmRow r{&s, p, impl, M, Nn, K, flops};
    r.peak = gr.PeakOf(impl);
    if (impl == Impl::kOurs) {
      std::copy(out, out + M * out_ld, o.ref.p);
    } else {
      r.err = RelErr(out, o.ref.p, M, Nn, out_ld);
    }
    rows.push_back(r);
  }
  std::vector<std::vector<double>> times(rows.size());
  double spent = 0;
  for (int rep = 0; rep < gr.max_reps; ++rep) {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const double t = Time(gr, rows[i].impl, p, o, N, s);
      times[i].push_back(t);
      spent += t;
    }
    if (rep + 1 >= gr.min_reps && spent >= gr.target * static_cast<double>(rows.size())) break;
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i].seconds = Median(times[i]);
    rows[i].best = *std::min_element(times[i].begin(), times[i].end());
    rows[i].reps = times[i].size();
  }
  return rows;
}

// One product's lines: its fp32 rows (ours first), then its bf16 rows, each "impl GFLOP/s % of
// its peak", then each row's speed over ours.
void PrintProduct(const std::vector<GemmRow>& rows) {
  const GemmRow& r0 = rows.front();
  const double ours = r0.gflops();  // rows[0] is ours (MeasureProduct's order)
  for (const bool bf16 : {false, true}) {
    std::string cells, ratios;
    for (const GemmRow& r : rows) {
      if (IsBf16(r.impl) != bf16) continue;
      cells += fmt::format(" | {} {:.1f} {:.0f}%", ImplName(r.impl), r.gflops(),
                           100 * r.gflops() / r.peak);
      if (r.impl != Impl::kOurs) ratios += fmt::format(" {:.2f}x", r.gflops() / ours);
    }
    if (cells.empty()) continue;
    if (bf16) {
      std::printf("  %-8s %-10s %20s%s | x ours:%s\n", "", "", "", cells.c_str(), ratios.c_str());
    } else {
      std::printf("  %-8s %-10s %6zu %6zu %6zu%s | x ours:%s\n", r0.shape->name.c_str(),
                  ProductName(r0.product), r0.M, r0.N, r0.K, cells.c_str(), ratios.c_str());
    }
  }
}

// Each row's "gemm" record.
void AddProductRecords(const std::vector<GemmRow>& rows, const std::string& model, int g, int T,
                       SuiteRecords* report) {
  for (const GemmRow& r : rows) {
    report->Add({{"kind", "gemm"},
                 {"model", model},
                 {"group", g},
                 {"threads", T},
                 {"shape", r.shape->name},
                 {"product", ProductName(r.product)},
                 {"impl", ImplName(r.impl)},
                 {"M", r.M},
                 {"N", r.N},
                 {"K", r.K},
                 {"per_step", r.shape->per_step},
                 {"seconds", r.seconds},
                 {"reps", r.reps},
                 {"gflops", r.gflops()},
                 {"gflops_best", r.flops / r.best / 1e9},
                 {"precision", IsBf16(r.impl) ? "bf16" : "fp32"},
                 {"peak_gflops", r.peak},
                 {"pct_peak", 100.0 * r.gflops() / r.peak},
                 {"rel_err_vs_ours", r.err}});
  }
}

// The step's products per implementation: each shape's products weighted by its uses per step.
void PrintStepSummary(const GemmGroup& gr, const ModelPreset& m, const std::vector<GemmRow>& rows,
                      SuiteRecords* report) {
  std::map<Impl, double> step_secs;
  double step_flops = 0;
  for (const GemmRow& r : rows) {
    step_secs[r.impl] += r.seconds * r.shape->per_step;
    if (r.impl == Impl::kOurs) step_flops += r.flops * r.shape->per_step;
  }
  std::printf("  per step (%d x each block shape + LM head, 3 products each; %.1f GFLOP):\n",
              m.shape.L, step_flops / 1e9);
  for (Impl impl : gr.impls) {
    const double pk = gr.PeakOf(impl);
    const double gflops = step_flops / step_secs[impl] / 1e9;
    std::printf("    %-14s %9.1f ms  %7.1f GFLOP/s  %5.1f%% of %s peak  %5.2fx ours\n",
                ImplName(impl), step_secs[impl] * 1e3, gflops, 100 * gflops / pk,
                IsBf16(impl) ? "bf16" : "fp32", step_secs[Impl::kOurs] / step_secs[impl]);
    report->Add({{"kind", "summary"},
                 {"model", m.name},
                 {"group", gr.g},
                 {"threads", gr.pool->size()},
                 {"impl", ImplName(impl)},
                 {"step_gemm_seconds", step_secs[impl]},
                 {"step_gemm_flops", step_flops},
                 {"gflops", gflops},
                 {"precision", IsBf16(impl) ? "bf16" : "fp32"},
                 {"peak_gflops", pk},
                 {"pct_peak", 100 * gflops / pk},
                 {"speedup_vs_ours", step_secs[Impl::kOurs] / step_secs[impl]}});
  }
}

void GemmSuite::RunModel(const GemmGroup& gr, const std::string& mname, const BenchContext& ctx,
                         SuiteRecords* report) {
  const ModelPreset m = ResolveModel(mname, ctx.config);
  const int G = groups_;
  if (m.B % G != 0) {
    throw InputError(
        fmt::format("model {}: B = {} is not divisible by the {} groups", m.name, m.B, G),
        "pick a placement whose group count divides the batch");
  }
  const std::size_t N = static_cast<std::size_t>(m.B / G) * static_cast<std::size_t>(m.T);
  std::printf("\n  model %s (%s): N = %d x %d = %zu rows per group\n", m.name.c_str(),
              m.Describe().c_str(), m.B / G, m.T, N);
  std::printf(
      "  %-8s %-10s %6s %6s %6s | impl GFLOP/s %% of its peak (fp32 FMA, VDPBF16PS or AMX)\n",
      "shape", "product", "M", "N", "K");
  WorkerPool& pool = *gr.pool;
  const std::vector<Shape> shapes = ShapesOf(m);
  std::vector<GemmRow> all;  // every shape's and product's rows, for the step's summary
  double worst_err = 0, worst_bf16_err = 0;
  for (const Shape& s : shapes) {
    Operands o(gr.node, N, s);
    Fill(pool, o.inp.p, o.inp.n, 1);
    Fill(pool, o.w.p, o.w.n, 2);
    Fill(pool, o.dout.p, o.dout.n, 3);
    Fill(pool, o.out.p, o.out.n, 4);
    Fill(pool, o.dinp.p, o.dinp.n, 5);
    Fill(pool, o.dw.p, o.dw.n, 6);
    Fill(pool, o.ref.p, o.ref.n, 7);
    if (gr.peak.bf16 || gr.peak.amx) {
      kernels::ConvertToBf16(pool, o.inp16.bf16(), o.inp.p, o.inp.n);
      kernels::ConvertToBf16(pool, o.w16.bf16(), o.w.p, o.w.n);
      kernels::ConvertToBf16(pool, o.dout16.bf16(), o.dout.p, o.dout.n);
    }
    for (Product p : kProducts) {
      // measure -> rows, records(rows), print(rows)
      const std::vector<GemmRow> rows = MeasureProduct(gr, p, o, N, s);
      for (const GemmRow& r : rows) {
        if (r.impl == Impl::kOurs) continue;
        double& worst = IsBf16(r.impl) ? worst_bf16_err : worst_err;
        worst = std::max(worst, r.err);
      }
      AddProductRecords(rows, m.name, gr.g, pool.size(), report);
      PrintProduct(rows);
      all.insert(all.end(), rows.begin(), rows.end());
    }
  }
  PrintStepSummary(gr, m, all, report);
  std::printf("    largest relative difference from ours' results: %.1e%s\n", worst_err,
              worst_err > 1e-4 ? "  (WARNING: larger than fp32 reordering explains)" : "");
  if (gr.peak.bf16 || gr.peak.amx) {
    std::printf(
        "    largest relative difference of the bf16 results from ours (fp32): %.1e "
        "(bf16 inputs: 8-bit mantissas)\n",
        worst_bf16_err);
  }
  ReportAttention(pool, gr.peak, m, G, gr.g, gr.target, report);
  if (worst_err > 1e-4) {
    log::Warn("bench gemm: an implementation's results differ from ours by {:.1e} (relative)",
              worst_err);
  }
}

// The group's FMA (and bf16) peaks: printed, recorded, and which implementations run.
void GemmSuite::Peaks(GemmGroup* gr, SuiteRecords* report) {
  const PeakResult& peak = gr->peak;
  const int T = gr->pool->size(), g = gr->g;
  const std::vector<int>& cpus = gr->pg->cpus;
  std::printf(
      "\ngroup %d: %d thread(s) on CPUs %s, memory on node %d\n  FMA peak (GFLOP/s): one core "
      "%.1f (256-bit)%s; group %.1f (256-bit)%s -> peak used for %% = %.1f\n",
      g, T, topo::Topology::FormatCpuList(cpus).c_str(), gr->node, peak.core_256,
      peak.avx512 ? fmt::format(", {:.1f} (512-bit)", peak.core_512).c_str() : "", peak.group_256,
      peak.avx512 ? fmt::format(", {:.1f} (512-bit)", peak.group_512).c_str() : "", peak.group());
  for (auto [scope, width, gflops, threads] :
       {std::tuple{"core", FmaWidth::k256, peak.core_256, 1},
        std::tuple{"core", FmaWidth::k512, peak.core_512, 1},
        std::tuple{"group", FmaWidth::k256, peak.group_256, T},
        std::tuple{"group", FmaWidth::k512, peak.group_512, T}}) {
    if (width == FmaWidth::k512 && !peak.avx512) continue;
    report->Add({{"kind", "peak"},
                 {"scope", scope},
                 {"isa", FmaWidthName(width)},
                 {"group", g},
                 {"threads", threads},
                 {"cpus", cpus},
                 {"gflops", gflops}});
  }
  // The rows: the fp32 ones everywhere (onednn-fp32 where the build has oneDNN), the bf16 ones
  // only where the CPU runs bf16 products natively (VDPBF16PS, AMX).
  gr->impls = {Impl::kOurs, Impl::kOpenblasMt, Impl::kOwn};
  if (kernels::OnednnGemm::Available()) gr->impls.push_back(Impl::kOnednnF32);
  gr->bf16_peak = peak.group_bf16_peak();
  gr->amx_peak = peak.group_amx_peak();
  if (!kernels::OnednnGemm::Available()) {
    std::printf("  onednn rows skipped: %s\n", kernels::OnednnGemm::kMissing);
  }
  const std::string amx_missing = kernels::Bf16KernelMissing(kernels::Bf16Kernel::kAmx);
  if (peak.amx) {
    std::printf(
        "  AMX peak (TDPBF16PS on resident tiles, GFLOP/s): one core %.1f; group %.1f -> "
        "%.1f for %%\n",
        peak.core_amx, peak.group_amx, gr->amx_peak);
  } else {
    std::printf("  AMX peak loop and own-amx rows: not available (%s)\n", amx_missing.c_str());
  }
  std::printf(
      "  tile-model (our AMX kernel on the portable tile model) is a correctness backend: "
      "tested, not timed\n");
  if (!peak.bf16 && !peak.amx) {
    std::printf("  no bf16 rows: %s\n", kernels::DetectBf16().Describe().c_str());
    return;
  }
  if (peak.bf16) gr->impls.push_back(Impl::kOwnBf16);
  if (peak.amx) gr->impls.push_back(Impl::kAmx);
  if (kernels::OnednnGemm::Available()) {
    gr->impls.push_back(Impl::kBf16);
    gr->impls.push_back(Impl::kBf16Mt);
  }
  if (peak.bf16) {
    std::printf("  bf16 peak (VDPBF16PS, GFLOP/s): one core %.1f; group %.1f -> %.1f for %%\n",
                peak.core_bf16, peak.group_bf16, gr->bf16_peak);
  }
  for (auto [scope, width, gflops, threads] :
       {std::tuple{"core", FmaWidth::kBf16, peak.core_bf16, 1},
        std::tuple{"group", FmaWidth::kBf16, peak.group_bf16, T},
        std::tuple{"core", FmaWidth::kAmx, peak.core_amx, 1},
        std::tuple{"group", FmaWidth::kAmx, peak.group_amx, T}}) {
    if (gflops <= 0) continue;
    report->Add({{"kind", "peak"},
                 {"scope", scope},
                 {"isa", FmaWidthName(width)},
                 {"group", g},
                 {"threads", threads},
                 {"cpus", cpus},
                 {"gflops", gflops}});
  }
  gr->pool->ForEachThread([](int) { kernels::OnednnGemm::SetCallerThreads(1); });
}

void GemmSuite::Run(const BenchContext& ctx, SuiteRecords* report) {
  kernels::InitBlas();
  const topo::Topology topo = topo::LoadTopology(ctx.config.topology);
  const topo::Plan plan =
      topo::PlanPlacement(topo, ctx.config.placement, std::getenv("OMP_NUM_THREADS"));
  alloc::Configure(alloc::OptionsFor(topo));
  std::unique_ptr<topo::Binder> binder = topo::MakeBinder(topo);
  groups_ = static_cast<int>(plan.groups.size());
  const std::vector<std::string> names =
      models_.empty() ? std::vector<std::string>{"config"} : models_;

  std::printf("gemm: %d group(s) of the placement plan%s; OpenBLAS %s (core %s)\n", groups_,
              topo.simulated ? " (SIMULATED topology: threads not pinned, memory not bound; the "
                               "numbers are this machine's)"
                             : "",
              openblas_get_config(), openblas_get_corename());
  std::printf(
      "  ours = partitioned single-threaded OpenBLAS (training's path); openblas-mt = one call, "
      "OpenBLAS threads; own-avx2 = our 6x16 kernel, same partition. Median of reps after a "
      "warm-up.\n");
  // What training would run here with this config (each row below names its own kernel).
  const kernels::Fp32Kernel fp32 =
      kernels::ParseFp32Kernel(ctx.config.train.fp32_kernel).value_or(kernels::Fp32Kernel::kAuto);
  std::printf("  training's %s\n",
              kernels::Fp32KernelLine(kernels::UseFp32Kernel(fp32), fp32).c_str());
  const kernels::Bf16Kernel bf16 =
      kernels::ParseBf16Kernel(ctx.config.train.bf16_kernel).value_or(kernels::Bf16Kernel::kAuto);
  try {
    std::printf("  training's %s\n",
                kernels::Bf16KernelLine(kernels::UseBf16Kernel(bf16), bf16).c_str());
  } catch (const InputError& e) {
    std::printf("  training's bf16 products: none (%s)\n", e.what());
  }
  // `ours` is OpenBLAS whatever training would pick (onednn-fp32 is its own row).
  kernels::UseFp32Kernel(kernels::Fp32Kernel::kOpenblas, "bench gemm");

  for (int g = 0; g < groups_; ++g) {
    GemmGroup gr;
    gr.g = g;
    gr.pg = &plan.groups[static_cast<std::size_t>(g)];
    gr.node = gr.pg->numa_node >= 0 ? gr.pg->numa_node : topo.numa_nodes.front().os_index;
    WorkerPool pool(gr.pg->cpus, binder.get(), fmt::format("gemm{}", g));
    gr.pool = &pool;
    gr.binder = binder.get();
    gr.target = ctx.quick ? 0.05 : 0.5;
    gr.min_reps = ctx.quick ? 2 : 3;
    gr.max_reps = ctx.quick ? 5 : 50;
    gr.peak = MeasurePeak(pool, binder.get(), ctx.quick);
    Peaks(&gr, report);
    // The bound calling thread of openblas-mt: this thread, bound to the group's CPUs for the
    // duration (and given its old binding back after).
    gr.old_binding = binder->ThisThreadBinding();
    for (const std::string& mname : names) RunModel(gr, mname, ctx, report);
  }
  std::fflush(stdout);
}

}  // namespace

std::unique_ptr<Suite> MakeGemmSuite() { return std::make_unique<GemmSuite>(); }

}  // namespace cputrain::bench
