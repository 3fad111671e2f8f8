// Adafactor as transformers.optimization.Adafactor.step runs it, per tensor (model::HfView: the
// tensors transformers holds), t the 1-based update count:
//   RMS_p = ||p|| / sqrt(numel)                               (before this step's update)
//   lr = (scale_parameter ? max(eps2, RMS_p) : 1) * (relative_step ? min(warmup_init ? 1e-6 t :
//        1e-2, 1/sqrt(t)) : the schedule's lr)
//   beta2t = 1 - t^decay_rate;  q = g^2 + eps1
//   matrix (rows x cols): row = row*beta2t + mean_cols(q)*(1-beta2t);
//                         col = col*beta2t + mean_rows(q)*(1-beta2t);
//                         u = rsqrt(row / mean(row))[r] * rsqrt(col)[c] * g
//   otherwise:            v = v*beta2t + q*(1-beta2t);  u = rsqrt(v) * g
//   u = u / max(1, RMS(u) / clip_threshold) * lr
//   beta1 > 0: m = m*beta1 + u*(1-beta1); u = m
//   p = p + p*(-weight_decay*lr) (decayed tensors);  p = p - u
// A tensor cut by a shard boundary: each shard sums its part of the row and column sums, ||p||^2
// and ||u||^2; Shard::sum_across_shards adds them up (phases below), and every shard the tensor
// reaches into keeps its whole row and column moments, computed alike from the same sums.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/bf16.h"
#include "model/family.h"
#include "optim/optimizers.h"

namespace cputrain::optim {
namespace {

struct View {
  model::HfView v;
  std::size_t row_at = 0, col_at = 0, vec_at = 0;  // in the whole model's slot vectors
  std::size_t stat_at = 0;  // scratch: [sum p^2 | row sums | column sums] (a matrix's)
  std::size_t end() const { return v.offset + v.rows * v.cols; }
  std::size_t numel() const { return v.rows * v.cols; }
};

// A view's part in a shard: flat [a, b), and where its state lies in the shard's buffers.
struct Part {
  const View* view;
  std::size_t a, b;
  // Where the shard's exp_avg_sq_row/col of the view start in their buffers, or its exp_avg_sq
  // of element a.
  std::size_t row, col, vec;
  // A matrix's rows [RowBegin(), RowEnd()) meet [a, b); row r's columns there are
  // [*c0, *c1) (Columns).
  std::size_t RowBegin() const { return (a - view->v.offset) / view->v.cols; }
  std::size_t RowEnd() const { return (b - view->v.offset + view->v.cols - 1) / view->v.cols; }
  void Columns(std::size_t r, std::size_t* c0, std::size_t* c1) const {
    const std::size_t base = view->v.offset + r * view->v.cols;
    *c0 = std::max(a, base) - base;
    *c1 = std::min(b, base + view->v.cols) - base;
  }
};

class Adafactor final : public Optimizer {
 public:
  Adafactor(const OptimConfig& c, const model::ParamLayout& layout);
  const char* name() const override { return "adafactor"; }
  std::string Describe() const override;
  std::vector<Slot> Slots(std::size_t lo, std::size_t hi) const override;
  std::size_t ReduceFloats() const override { return stats_ + views_.size(); }
  double StepLr(double schedule_lr, int t) const override {
    if (!k_.relative_step) return schedule_lr;
    const double st = static_cast<double>(t);
    return std::min(k_.warmup_init ? 1e-6 * st : 1e-2, 1.0 / std::sqrt(st));
  }
  void Update(const Shard& s, const StepArgs& a) const override;

 private:
  // Calls fn(Part) for each view the shard [lo, hi) reaches into, in order.
  template <class Fn>
  void ForEachPart(std::size_t lo, std::size_t hi, Fn&& fn) const;
  bool first_moment() const { return k_.beta1 > 0; }
  void SumStatistics(const Shard& s, const Part& p, float scale) const;
  // The shard's buffer of slot k of exp_avg_sq_row, exp_avg_sq_col, exp_avg_sq (0, 1, 2).
  float* Moment(const Shard& s, int k) const {
    return s.slots[static_cast<std::size_t>((first_moment() ? 1 : 0) + k)];
  }
  void MovingAverages(const Shard& s, const Part& p, float* sums, float beta2t) const;
  void ScaledUpdate(const Shard& s, const Part& p, const float* stats, float beta2t,
                    float* usum) const;
  void Apply(const Shard& s, const StepArgs& a, const Part& p, float psum, float usum) const;

  const AdafactorConfig k_;
  const double weight_decay_;
  std::size_t total_;
  std::vector<View> views_;
  std::size_t rows_ = 0, cols_ = 0, vecs_ = 0, stats_ = 0;  // whole-model slot lengths, scratch
};

Adafactor::Adafactor(const OptimConfig& c, const model::ParamLayout& layout)
    : k_(c.adafactor), weight_decay_(c.weight_decay), total_(layout.total()) {
  for (const model::HfView& v : model::HfViews(layout)) {
    View w{v};
    w.stat_at = stats_;
    stats_ += 1;
    if (v.matrix) {
      w.row_at = rows_, w.col_at = cols_;
      rows_ += v.rows, cols_ += v.cols;
      stats_ += v.rows + v.cols;
    } else {
      w.vec_at = vecs_;
      vecs_ += v.cols;
    }
    views_.push_back(w);
  }
}

std::string Adafactor::Describe() const {
  return fmt::format("adafactor ({}{}{}, clip {:g}, decay rate {:g}, weight decay {:g})",
                     k_.relative_step
                         ? (k_.warmup_init ? "relative step with warmup" : "relative step")
                         : "the schedule's lr",
                     k_.scale_parameter ? ", parameter scale" : "",
                     first_moment() ? fmt::format(", beta1 {:g}", k_.beta1) : ", no first moment",
                     k_.clip_threshold, k_.decay_rate, weight_decay_);
}

template <class Fn>
void Adafactor::ForEachPart(std::size_t lo, std::size_t hi, Fn&& fn) const {
  std::size_t row = 0, col = 0, vec = 0;
  auto it = std::upper_bound(views_.begin(), views_.end(), lo,
                             [](std::size_t lo, const View& w) { return lo < w.end(); });
  for (; it != views_.end() && it->v.offset < hi; ++it) {
    const std::size_t a = std::max(it->v.offset, lo), b = std::min(it->end(), hi);
    fn(Part{&*it, a, b, row, col, vec});
    if (it->v.matrix) {
      row += it->v.rows, col += it->v.cols;
    } else {
      vec += b - a;
    }
  }
}

std::vector<Slot> Adafactor::Slots(std::size_t lo, std::size_t hi) const {
  std::vector<Slot> slots;
  if (first_moment()) slots.push_back({"exp_avg", total_, hi - lo, {{lo, 0, hi - lo}}});
  Slot row{"exp_avg_sq_row", rows_, 0, {}}, col{"exp_avg_sq_col", cols_, 0, {}},
      vec{"exp_avg_sq", vecs_, 0, {}};
  ForEachPart(lo, hi, [&](const Part& p) {
    const View& w = *p.view;
    if (w.v.matrix) {
      row.pieces.push_back({w.row_at, row.local, w.v.rows});
      col.pieces.push_back({w.col_at, col.local, w.v.cols});
      row.local += w.v.rows, col.local += w.v.cols;
    } else {
      vec.pieces.push_back({w.vec_at + (p.a - w.v.offset), vec.local, p.b - p.a});
      vec.local += p.b - p.a;
    }
  });
  slots.push_back(std::move(row));
  slots.push_back(std::move(col));
  slots.push_back(std::move(vec));
  return slots;
}

// Phase 1, the shard's part of a view: gradients scaled by the clip coefficient (in place), and
// into the scratch at stat_at: sum p^2 (scale_parameter), and a matrix's row and column sums of
// g^2 + eps1 over the part's elements. Each row's sum and each column's sum runs in row and
// column order whatever the threads: the same floats on any pool.
void Adafactor::SumStatistics(const Shard& s, const Part& p, float scale) const {
  const View& w = *p.view;
  float* stat = s.scratch + w.stat_at;
  const float eps1 = static_cast<float>(k_.eps1);
  const std::size_t cols = w.v.cols;
  const std::size_t r0 = p.RowBegin(), r1 = p.RowEnd();
  thread_local std::vector<double> tl_partial;
  tl_partial.assign(static_cast<std::size_t>(s.pool->size()), 0.0);
  double* partial = tl_partial.data();
  s.pool->ParallelFor(r1 - r0, [&](std::size_t rb, std::size_t re, int tid) {
    double psum = 0;
    for (std::size_t r = r0 + rb; r < r0 + re; ++r) {
      std::size_t c0, c1;
      p.Columns(r, &c0, &c1);
      float* g = s.grads + w.v.offset + r * cols;
      const float* x = s.params + w.v.offset + r * cols;
      double rsum = 0;
      for (std::size_t c = c0; c < c1; ++c) {
        g[c] *= scale;  // torch's clip_grad_norm_ scales the gradients in place
        psum += static_cast<double>(x[c]) * x[c];
        rsum += static_cast<double>(g[c] * g[c] + eps1);
      }
      if (w.v.matrix) stat[1 + r] = static_cast<float>(rsum);
    }
    partial[tid] = psum;
  });
  double psum = 0;
  for (double x : tl_partial) psum += x;
  stat[0] = static_cast<float>(psum);
  if (!w.v.matrix) return;
  float* colsum = stat + 1 + w.v.rows;
  s.pool->ParallelFor(cols, [&](std::size_t cb, std::size_t ce, int) {
    constexpr std::size_t kStrip = 64;
    for (std::size_t c = cb; c < ce; c += kStrip) {
      const std::size_t n = std::min(kStrip, ce - c);
      double acc[kStrip] = {};
      for (std::size_t r = r0; r < r1; ++r) {
        std::size_t c0, c1;
        p.Columns(r, &c0, &c1);
        const float* g = s.grads + w.v.offset + r * cols;
        for (std::size_t j = std::max(c, c0); j < std::min(c + n, c1); ++j)
          acc[j - c] += static_cast<double>(g[j] * g[j] + eps1);
      }
      for (std::size_t j = 0; j < n; ++j) colsum[c + j] = static_cast<float>(acc[j]);
    }
  });
}

// Phase 2, a matrix's moments from the summed statistics (every shard of the matrix alike), and
// the factors phase 3 multiplies by, written over the sums: rsqrt(row / mean(row)) and
// rsqrt(col).
void Adafactor::MovingAverages(const Shard& s, const Part& p, float* sums, float beta2t) const {
  const View& w = *p.view;
  float *row = Moment(s, 0) + p.row, *col = Moment(s, 1) + p.col;
  const std::size_t R = w.v.rows, C = w.v.cols;
  const float keep = beta2t, take = 1.f - beta2t;
  float *rows = sums + 1, *cols = sums + 1 + R;
  double row_total = 0;
  for (std::size_t r = 0; r < R; ++r) {
    row[r] = row[r] * keep + (rows[r] / static_cast<float>(C)) * take;
    row_total += row[r];
  }
  for (std::size_t c = 0; c < C; ++c) {
    col[c] = col[c] * keep + (cols[c] / static_cast<float>(R)) * take;
    cols[c] = 1.f / std::sqrt(col[c]);
  }
  const float mean = static_cast<float>(row_total / static_cast<double>(R));
  for (std::size_t r = 0; r < R; ++r) rows[r] = 1.f / std::sqrt(row[r] / mean);
}

// Phase 3, the unscaled update u over the part, in place of its gradients, and its sum of
// squares into *usum. A vector's second moment moves here (it is elementwise).
void Adafactor::ScaledUpdate(const Shard& s, const Part& p, const float* stats, float beta2t,
                             float* usum) const {
  const View& w = *p.view;
  const float keep = beta2t, take = 1.f - beta2t, eps1 = static_cast<float>(k_.eps1);
  const float *rf = stats + 1, *cf = stats + 1 + w.v.rows;
  float* vec = w.v.matrix ? nullptr : Moment(s, 2) + p.vec;
  thread_local std::vector<double> tl_partial;
  tl_partial.assign(static_cast<std::size_t>(s.pool->size()), 0.0);
  double* partial = tl_partial.data();
  if (!w.v.matrix) {
    s.pool->ParallelFor(p.b - p.a, [&](std::size_t b, std::size_t e, int tid) {
      double sum = 0;
      for (std::size_t i = p.a + b; i < p.a + e; ++i) {
        float& v = vec[i - p.a];
        const float g = s.grads[i];
        v = v * keep + (g * g + eps1) * take;
        const float u = (1.f / std::sqrt(v)) * g;
        s.grads[i] = u;
        sum += static_cast<double>(u) * u;
      }
      partial[tid] = sum;
    });
  } else {
    // Row by row (no division per element): rows [r0, r1) meet the part.
    const std::size_t cols = w.v.cols, r0 = p.RowBegin(), r1 = p.RowEnd();
    s.pool->ParallelFor(r1 - r0, [&](std::size_t rb, std::size_t re, int tid) {
      double sum = 0;
      for (std::size_t r = r0 + rb; r < r0 + re; ++r) {
        std::size_t c0, c1;
        p.Columns(r, &c0, &c1);
        float* g = s.grads + w.v.offset + r * cols;
        const float f = rf[r];
        float row_sum = 0;  // per row in float (vectorizable), rows added in double
        for (std::size_t c = c0; c < c1; ++c) {
          const float u = (f * cf[c]) * g[c];
          g[c] = u;
          row_sum += u * u;
        }
        sum += row_sum;
      }
      partial[tid] = sum;
    });
  }
  double sum = 0;
  for (double x : tl_partial) sum += x;
  *usum = static_cast<float>(sum);
}

// Phase 4: clip by the tensor's update RMS, scale by lr, the first moment, weight decay, and the
// parameters (and their bf16 copy) updated.
void Adafactor::Apply(const Shard& s, const StepArgs& a, const Part& p, float psum,
                      float usum) const {
  const View& w = *p.view;
  const float n = static_cast<float>(w.numel());
  const float rms_p = std::sqrt(psum) / std::sqrt(n), rms_u = std::sqrt(usum) / std::sqrt(n);
  const double scale = k_.scale_parameter ? std::max(k_.eps2, static_cast<double>(rms_p)) : 1.0;
  const float lr = static_cast<float>(scale * StepLr(a.lr, a.t));
  const float denom = std::max(1.f, rms_u / static_cast<float>(k_.clip_threshold));
  const float b1 = static_cast<float>(k_.beta1), c1 = static_cast<float>(1.0 - k_.beta1);
  const float decay = w.v.decay ? -static_cast<float>(weight_decay_) * lr : 0.f;
  float* m = first_moment() ? s.slots[0] : nullptr;
  s.pool->ParallelFor(p.b - p.a, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t i = p.a + b; i < p.a + e; ++i) {
      float u = s.grads[i] / denom * lr;
      if (m) {
        float& mi = m[i - s.lo];
        mi = mi * b1 + u * c1;
        u = mi;
      }
      float x = s.params[i];
      if (decay != 0.f) x = x + x * decay;
      x = x + (-u);
      s.params[i] = x;
      if (s.params_bf16) s.params_bf16[i] = kernels::FloatToBf16(x);
    }
  });
}

void Adafactor::Update(const Shard& s, const StepArgs& a) const {
  const float beta2t = static_cast<float>(1.0 - std::pow(static_cast<double>(a.t), k_.decay_rate));
  float *stats = s.scratch, *usums = s.scratch + stats_;
  std::memset(s.scratch, 0, ReduceFloats() * sizeof(float));
  ForEachPart(s.lo, s.hi, [&](const Part& p) { SumStatistics(s, p, a.grad_scale); });
  s.sum_across_shards(stats, stats_);
  ForEachPart(s.lo, s.hi, [&](const Part& p) {
    if (p.view->v.matrix) MovingAverages(s, p, stats + p.view->stat_at, beta2t);
  });
  ForEachPart(s.lo, s.hi, [&](const Part& p) {
    ScaledUpdate(s, p, stats + p.view->stat_at, beta2t, usums + (p.view - views_.data()));
  });
  s.sum_across_shards(usums, views_.size());
  ForEachPart(s.lo, s.hi, [&](const Part& p) {
    Apply(s, a, p, stats[p.view->stat_at], usums[p.view - views_.data()]);
  });
}

}  // namespace

std::unique_ptr<Optimizer> MakeAdafactor(const OptimConfig& c, const model::ParamLayout& layout) {
  return std::make_unique<Adafactor>(c, layout);
}

}  // namespace cputrain::optim
