// A run's matrix products by class, for the calibration (model/products.h).
#include "model/products.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <new>

#include "common/error.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "model/family.h"

namespace cputrain::model {
namespace {

// One linear of the run, its input and output widths cut to the caps (see products.h).
struct Linear {
  const char* name;
  int IC, OC;
};

template <class T>
struct Buffer {
  T* p = nullptr;
  std::size_t n = 0;
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { ::operator delete (p, std::align_val_t{64}); }
  // n elements, filled by the pool (their first touch: the group's node) with values in
  // [-0.5, 0.5): no denormal, and products that stay far from overflow however often they run.
  void Make(WorkerPool& pool, std::size_t count) {
    if (count == 0) return;
    n = count;
    p = static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64}));
    pool.ParallelFor(n, [this](std::size_t b, std::size_t e, int) {
      for (std::size_t i = b; i < e; ++i) {
        const float v = static_cast<float>((i * 2654435761u) >> 8 & 1023) / 1024.f - 0.5f;
        if constexpr (sizeof(T) == 2) {
          p[i] = kernels::FloatToBf16(v);
        } else {
          p[i] = v;
        }
      }
    });
  }
};

int Floor16(double x) { return std::max(16, static_cast<int>(x) / 16 * 16); }

}  // namespace

struct ProductWorks::Impl {
  WorkerPool& pool;
  ProductRun run;
  std::vector<Linear> block;
  Linear head{"lm_head", 0, 0};
  int max_rows = 0, min_rows = 0;
  int Ta = 0, hs = 0, max_heads = 0;  // attention: positions, head size, heads at most
  // X the input (rows, IC), W the weight (OC, IC), Y the output and dout (rows, OC), G the input
  // gradient (rows, IC), D the weight gradient (OC, IC): no product writes what another reads.
  Buffer<float> X, W, Y, G, D;
  Buffer<uint16_t> Xb, Wb, Yb;  // bf16 operands (bf16 runs)
  Buffer<float> qkv, att, out, dqkv, dout, scratch;
  Buffer<uint16_t> qkv_b, dout_b, scratch_b;
  // LoRA's A (r, C), B (C, r), their gradients, h and dh (rows, r). Its forward and input gradient
  // add into Y and G: they grow by a bounded amount a run, never geometrically.
  Buffer<float> la, lb, lga, lgb, lh, ldh;

  bool allocated = false;

  Impl(WorkerPool& p, const ProductRun& r) : pool(p), run(r) {}
  void Plan();
  void Allocate();  // once, on the first Works(): a cache hit allocates nothing
  int Rows(double target, double flops_per_row) const {
    return std::clamp(Floor16(target / std::max(1.0, flops_per_row)), min_rows, max_rows);
  }
  double LinearFlopsPerRow(const std::vector<Linear>& ls) const {
    double f = 0;
    for (const Linear& l : ls) f += 2.0 * l.IC * l.OC;
    return f;
  }
  kernels::ClassWork LinearWork(kernels::GemmClass cls, const std::vector<Linear>& ls,
                                kernels::GemmSite site, bool bf16, double target);
  kernels::ClassWork AttentionWork(bool backward, bool bf16, double target);
  kernels::ClassWork LoraWork(double target);
};

// The caps applied to the run's shapes (products.h).
void ProductWorks::Impl::Plan() {
  const Shape& s = run.shape;
  const int cap_in = 4096;
  auto cut = [&](const char* name, int IC, int OC) {
    const int ic = std::min(IC, cap_in);
    const int oc = std::min<int>(OC, std::max<std::size_t>(16, kMaxWeight / ic / 16 * 16));
    return Linear{name, ic, oc};
  };
  block = {cut("qkv", s.C, s.qkv_width()), cut("attproj", s.attn_width(), s.C),
           cut("fc", s.C, s.mlp_in_width()), cut("fcproj", s.ffn(), s.C)};
  if (s.head == Head::kLm) head = cut("lm_head", s.C, s.Vp);
  int widest = head.IC > 0 ? std::max(head.IC, head.OC) : 0;
  for (const Linear& l : block) widest = std::max({widest, l.IC, l.OC});
  min_rows = 16 * pool.size();
  max_rows = std::max(min_rows, std::min(Floor16(run.rows), Floor16(kMaxWeight / widest)));
  Ta = std::min(run.T, kMaxT);
  hs = s.head_size();
  max_heads = std::max(pool.size(), static_cast<int>(kMaxWeight / (std::size_t(Ta) * Ta)));
}

void ProductWorks::Impl::Allocate() {
  if (allocated) return;
  allocated = true;
  std::size_t in = 0, outw = 0, weight = 0;
  for (const Linear& l : block) {
    in = std::max<std::size_t>(in, l.IC);
    outw = std::max<std::size_t>(outw, l.OC);
    weight = std::max<std::size_t>(weight, std::size_t(l.IC) * l.OC);
  }
  in = std::max<std::size_t>(in, head.IC);
  outw = std::max<std::size_t>(outw, head.OC);
  // LoraWork's adapted product writes (and its backward reads) C = block[0].IC columns of Y,
  // wider than the cut outputs where C > kMaxWeight / C (Llama 3.1 8B: 4096 against 1024).
  if (run.lora_r > 0) outw = std::max<std::size_t>(outw, block[0].IC);
  weight = std::max(weight, std::size_t(head.IC) * head.OC);
  const std::size_t rows = max_rows;
  X.Make(pool, rows * in);
  W.Make(pool, weight);
  Y.Make(pool, rows * outw);
  if (run.train) G.Make(pool, rows * in);
  if (run.train && run.lora_r == 0) D.Make(pool, weight);
  if (run.bf16) {
    Xb.Make(pool, rows * in);
    Wb.Make(pool, weight);
    Yb.Make(pool, rows * outw);
  }
  const std::size_t R = std::size_t(3) * max_heads * hs, C = std::size_t(max_heads) * hs;
  const std::size_t T = Ta, threads = pool.size();
  qkv.Make(pool, T * R);
  att.Make(pool, std::size_t(max_heads) * T * T);
  out.Make(pool, T * C);
  if (run.train) {
    dqkv.Make(pool, T * R);
    dout.Make(pool, T * C);
    scratch.Make(pool, kernels::AttentionScratchFloats(pool.size(), Ta));
  }
  if (run.bf16) {
    qkv_b.Make(pool, T * R);
    dout_b.Make(pool, T * C);
    scratch_b.Make(pool, kernels::AttentionScratchBf16(static_cast<int>(threads), Ta));
  }
  if (run.lora_r > 0) {
    const std::size_t r = run.lora_r, c = block[0].IC;
    la.Make(pool, r * c);
    lb.Make(pool, c * r);
    lga.Make(pool, r * c);
    lgb.Make(pool, c * r);
    lh.Make(pool, rows * r);
    ldh.Make(pool, rows * r);
  }
}

kernels::ClassWork ProductWorks::Impl::LinearWork(kernels::GemmClass cls,
                                                  const std::vector<Linear>& ls,
                                                  kernels::GemmSite site, bool bf16,
                                                  double target) {
  namespace k = kernels;
  // The run's rows (up to max_rows) and each linear's input width stay: they set the shape each
  // worker's GEMM has, which is what ranks the kernels (16 rows a worker ranked them by how they
  // pack a weight, not by how they multiply). The work is sized to `target` by cutting each
  // linear's output columns instead, to at least 16 a worker.
  const int rows = max_rows;
  std::vector<Linear> cut = ls;
  const double per_linear = target / static_cast<double>(ls.size());
  for (Linear& l : cut) {
    const int oc = Floor16(per_linear / (2.0 * rows * l.IC));
    l.OC = std::clamp(oc, std::min(l.OC, 16 * pool.size()), l.OC);
  }
  k::ClassWork w;
  w.cls = cls;
  w.flops = rows * LinearFlopsPerRow(cut);
  for (const Linear& l : cut)
    w.shapes += fmt::format("{}{} {}x{}", w.shapes.empty() ? "" : " ", l.name, l.IC, l.OC);
  w.shapes += fmt::format(" x {} rows", rows);
  const bool fwd = cls == k::GemmClass::kFwd || cls == k::GemmClass::kHeadFwd;
  const bool dinp = cls == k::GemmClass::kDinp || cls == k::GemmClass::kHeadDinp;
  w.run = [this, cut, site, bf16, fwd, dinp, rows] {
    const std::size_t N = rows;
    for (const Linear& l : cut) {
      if (fwd && bf16) {
        k::MatmulForwardBf16(pool, Y.p, X.p, Xb.p, Wb.p, nullptr, N, l.IC, l.OC, l.OC, site);
      } else if (fwd) {
        k::MatmulForward(pool, Y.p, X.p, W.p, nullptr, N, l.IC, l.OC, l.OC, site);
      } else if (bf16) {
        k::MatmulBackwardBf16(pool, dinp ? G.p : nullptr, dinp ? nullptr : D.p, nullptr, Y.p, Yb.p,
                              X.p, Xb.p, Wb.p, N, l.IC, l.OC, l.OC, false, site);
      } else {
        k::MatmulBackward(pool, dinp ? G.p : nullptr, dinp ? nullptr : D.p, nullptr, Y.p, X.p, W.p,
                          N, l.IC, l.OC, l.OC, false, site);
      }
    }
  };
  return w;
}

kernels::ClassWork ProductWorks::Impl::AttentionWork(bool backward, bool bf16, double target) {
  namespace k = kernels;
  // Per head: q k^T and P v (and in backward dP, dq, dk, dv: twice that), half under a causal
  // mask. Multi-head (no GQA): the per-head products are the same shapes either way.
  const bool causal = !run.shape.encoder();
  const double per_head = (backward ? 8.0 : 4.0) * Ta * Ta * hs * (causal ? 0.5 : 1.0);
  const int heads = std::clamp(static_cast<int>(target / per_head), pool.size(), max_heads);
  const int C = heads * hs;
  k::ClassWork w;
  w.cls = backward ? k::GemmClass::kAttnBwd : k::GemmClass::kAttnFwd;
  w.flops = heads * per_head;
  w.shapes = fmt::format("{} heads x {} positions, head size {}{}", heads, Ta, hs,
                         causal ? ", causal" : "");
  w.run = [this, backward, bf16, heads, C, causal] {
    k::AttentionOptions opt;
    const int len = Ta;
    if (!causal) opt.kv_len = &len;
    if (!backward && bf16) {
      k::AttentionForwardBf16(pool, out.p, att.p, qkv.p, qkv_b.p, scratch_b.p, 1, Ta, C, heads, 0,
                              opt);
    } else if (!backward) {
      k::AttentionForward(pool, out.p, att.p, qkv.p, 1, Ta, C, heads, 0, opt);
    } else if (bf16) {
      k::AttentionBackwardBf16(pool, dqkv.p, scratch.p, scratch_b.p, qkv_b.p, dout_b.p, dout.p,
                               qkv.p, att.p, 1, Ta, C, heads, 0, opt);
    } else {
      k::AttentionBackward(pool, dqkv.p, scratch.p, dout.p, qkv.p, att.p, 1, Ta, C, heads, 0, opt);
    }
  };
  return w;
}

kernels::ClassWork ProductWorks::Impl::LoraWork(double target) {
  namespace k = kernels;
  const int r = run.lora_r, C = block[0].IC;
  const double per_row = (run.train ? 3.0 : 1.0) * 4.0 * C * r;
  const int rows = Rows(target, per_row);
  k::ClassWork w;
  w.cls = k::GemmClass::kLora;
  w.flops = rows * per_row;
  w.shapes = fmt::format("rank {} on {}x{} x {} rows", r, C, C, rows);
  w.run = [this, r, C, rows] {
    const std::size_t N = rows;
    k::LoraForward(pool, Y.p, lh.p, nullptr, X.p, la.p, lb.p, N, C, r, C, C, 2.f, {});
    if (!run.train) return;
    k::LoraBackward(pool, G.p, lga.p, lgb.p, ldh.p, nullptr, Y.p, X.p, lh.p, la.p, lb.p, N, C, r, C,
                    C, 2.f, {});
  };
  return w;
}

ProductWorks::ProductWorks(WorkerPool& pool, const ProductRun& run)
    : impl_(std::make_unique<Impl>(pool, run)) {
  CPUTRAIN_CHECK(run.rows > 0 && run.T > 0, "ProductWorks: a run without rows");
  impl_->Plan();
}

ProductWorks::~ProductWorks() = default;

bool ProductWorks::Runs(const std::string& precision) const {
  return precision == "bf16" ? impl_->run.bf16 : !impl_->run.bf16 || impl_->run.lora_r > 0;
}

std::vector<kernels::ClassWork> ProductWorks::Works(const std::string& precision,
                                                    double target_flops) {
  namespace k = kernels;
  Impl& m = *impl_;
  m.Allocate();
  const bool bf16 = precision == "bf16";
  std::vector<k::ClassWork> out;
  if (bf16 == m.run.bf16) {  // the block, head and attention run in the run's precision
    const bool dweight = m.run.train && m.run.lora_r == 0;
    out.push_back(
        m.LinearWork(k::GemmClass::kFwd, m.block, k::GemmSite::kBlock, bf16, target_flops));
    if (m.run.train)
      out.push_back(
          m.LinearWork(k::GemmClass::kDinp, m.block, k::GemmSite::kBlock, bf16, target_flops));
    if (dweight)
      out.push_back(
          m.LinearWork(k::GemmClass::kDweight, m.block, k::GemmSite::kBlock, bf16, target_flops));
    if (m.head.OC > 0) {
      const std::vector<Linear> h = {m.head};
      out.push_back(
          m.LinearWork(k::GemmClass::kHeadFwd, h, k::GemmSite::kHead, bf16, target_flops));
      if (m.run.train)
        out.push_back(
            m.LinearWork(k::GemmClass::kHeadDinp, h, k::GemmSite::kHead, bf16, target_flops));
      if (dweight)
        out.push_back(
            m.LinearWork(k::GemmClass::kHeadDweight, h, k::GemmSite::kHead, bf16, target_flops));
    }
    out.push_back(m.AttentionWork(false, bf16, target_flops));
    if (m.run.train) out.push_back(m.AttentionWork(true, bf16, target_flops));
  }
  if (!bf16 && m.run.lora_r > 0) out.push_back(m.LoraWork(target_flops));  // LoRA runs in fp32
  return out;
}

std::string ProductWorks::Workload(const std::string& precision) const {
  const ProductRun& r = impl_->run;
  return fmt::format("{} {} on {} workers, {} rows of {} positions{}{}; {}", precision,
                     r.train ? "training" : "inference", impl_->pool.size(), r.rows, r.T,
                     r.bf16 ? ", bf16 run" : "",
                     r.lora_r > 0 ? fmt::format(", LoRA rank {}", r.lora_r) : std::string(),
                     r.shape.ToString());
}

}  // namespace cputrain::model
