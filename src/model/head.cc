// Sequence classification over any family (head.h).
#include "model/head.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "kernels/kernels.h"
#include "model/hf_config.h"
#include "model/limits.h"

namespace cputrain::model {
namespace {

using nlohmann::json;

constexpr int kClassifyHead = static_cast<int>(Head::kClassify);

bool Pooled(const Shape& s) { return FamilyOf(s.arch).classify_pooling != Pooling::kLastToken; }

// The position each row is classified by: 0 (an encoder's first token), or the last that is not
// the padding token (transformers: argmax over t of t * (id != pad_token_id)).
int PooledPosition(const Shape& s, const int* ids, int T) {
  if (Pooled(s)) return 0;
  for (int t = T - 1; t > 0; --t)
    if (ids[t] != s.pad_token) return t;
  return 0;
}

// The loss of one row's K logits, and d(loss)/d(logits) * dloss into dlogits when it is not
// null: cross-entropy against `label`; or the mean over the outputs of the squared error
// (regression) or of binary cross-entropy with logits (multi-label) against `target`.
double RowLoss(ProblemType problem, const float* logits, int K, int label, const float* target,
               float* dlogits, float dloss) {
  double loss = 0;
  if (problem == ProblemType::kSingleLabel) {
    float m = logits[0];
    for (int k = 1; k < K; ++k) m = std::max(m, logits[k]);
    double sum = 0;
    for (int k = 0; k < K; ++k) sum += std::exp(static_cast<double>(logits[k] - m));
    const double lse = m + std::log(sum);
    loss = lse - logits[label];
    if (dlogits) {
      for (int k = 0; k < K; ++k) {
        const double p = std::exp(logits[k] - lse);
        dlogits[k] = static_cast<float>((p - (k == label ? 1.0 : 0.0)) * dloss);
      }
    }
    return loss;
  }
  for (int k = 0; k < K; ++k) {
    const double x = logits[k], y = target[k];
    double d = 0;
    if (problem == ProblemType::kRegression) {
      loss += (x - y) * (x - y);
      d = 2 * (x - y);
    } else {  // max(x, 0) - x y + log(1 + exp(-|x|)), torch's stable form
      loss += std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::fabs(x)));
      d = 1 / (1 + std::exp(-x)) - y;
    }
    if (dlogits) dlogits[k] = static_cast<float>(d / K * dloss);
  }
  return loss / K;
}

// The head's products run over B rows of one position: the pooled vectors.
Net HeadNet(const Net& n) { return n.Rows(n.B, 1); }

// The classifier's bias: an encoder's classifier has one, a decoder's score none.
Tensor HeadBias(const Net& n) { return n.layout.has(kHeadb) ? kHeadb : kNumTensors; }

}  // namespace

std::vector<TensorInfo> ModelTensors(const Shape& s) {
  std::vector<TensorInfo> t = FamilyOf(s.arch).tensors(s);
  if (s.encoder() || s.head != Head::kClassify) return t;  // encoders list their heads' tensors
  const auto dim = [](int d) { return static_cast<std::size_t>(std::max(d, 0)); };
  std::erase_if(t, [](const TensorInfo& info) { return info.t == kLmHead; });
  t.push_back(MakeTensor(kHeadw, "score", false, true, Init::kNormal, {dim(s.labels), dim(s.C)}));
  return t;
}

const std::vector<HfTensor>& HfTensorsOf(const Family& f) {
  static const std::map<const Family*, std::vector<HfTensor>> all = [] {
    std::map<const Family*, std::vector<HfTensor>> m;
    for (const Family* family : Families()) {
      std::vector<HfTensor> t = family->hf_tensors;
      if (!family->kind.encoder && *family->hf_classify_architecture != '\0') {
        t.push_back({kHeadw, "score.weight", HfTensor::kAll, false, kClassifyHead});
      }
      m[family] = std::move(t);
    }
    return m;
  }();
  return all.at(&f);
}

void ReadHfHead(const json& cfg, const std::string& path, Shape* s) {
  const Family& f = FamilyOf(s->arch);
  std::string arch;
  if (cfg.contains("architectures") && cfg["architectures"].is_array() &&
      !cfg["architectures"].empty() && cfg["architectures"][0].is_string()) {
    arch = cfg["architectures"][0].get<std::string>();
  }
  s->head = f.kind.encoder ? Head::kSpan : Head::kLm;
  if (arch.find("ForSequenceClassification") == std::string::npos) return;
  s->head = Head::kClassify;
  if (cfg.contains("id2label") && cfg["id2label"].is_object() && !cfg["id2label"].empty()) {
    s->labels = static_cast<int>(std::min<std::size_t>(cfg["id2label"].size(), kMaxLabels + 1));
  } else {
    s->labels = hf::IntKey(cfg, "num_labels", path, kMaxLabels, 2);
  }
  // problem_type; unset, transformers decides at the loss: one output is a regression.
  s->problem = s->labels == 1 ? ProblemType::kRegression : ProblemType::kSingleLabel;
  if (cfg.contains("problem_type") && !cfg["problem_type"].is_null()) {
    if (!cfg["problem_type"].is_string()) {
      hf::BadConfig(path, "problem_type is not a string", "fix config.json");
    }
    s->problem = ProblemFromName(cfg["problem_type"].get<std::string>());
  }
  if (f.kind.encoder) return;  // its padding token is its embedding's (bert.cc)
  s->pad_token = -1;
  if (cfg.contains("pad_token_id") && cfg["pad_token_id"].is_number_integer()) {
    s->pad_token = static_cast<int>(
        std::clamp<long long>(cfg["pad_token_id"].get<long long>(), -1, kMaxVocab));
  }
}

void WriteHfHead(const Shape& s, json* cfg) {
  if (s.head != Head::kClassify) return;
  (*cfg)["architectures"] = {FamilyOf(s.arch).hf_classify_architecture};
  json id2label = json::object(), label2id = json::object();
  for (int i = 0; i < s.labels; ++i) {
    id2label[std::to_string(i)] = fmt::format("LABEL_{}", i);
    label2id[fmt::format("LABEL_{}", i)] = i;
  }
  (*cfg)["id2label"] = id2label;
  (*cfg)["label2id"] = label2id;
  (*cfg)["problem_type"] = ProblemName(s.problem);
  if (!s.encoder()) (*cfg)["pad_token_id"] = s.pad_token;
}

double ClassifyForward(WorkerPool& pool, const Net& n, Activations& a, const float* x,
                       const Bf16Operands* bf16, bool with_loss, const HeadDropout& drop) {
  const Shape& s = n.s;
  const int B = n.B, T = n.T, C = n.C, K = s.labels;
  const std::size_t BC = static_cast<std::size_t>(B) * C;
  // x0 (B,C): each row's pooled position, kept in a.ends for backward.
  for (int b = 0; b < B; ++b) {
    a.ends[b] = PooledPosition(s, a.inputs + static_cast<std::size_t>(b) * T, T);
    const float* row = x + n.Pos(b, a.ends[b]) * C;
    std::copy(row, row + C, a.cls_in + static_cast<std::size_t>(b) * C);
  }
  const Net h = HeadNet(n);
  const float* feature = a.cls_in;
  if (Pooled(s)) {  // pool = drop(act(x0 Wp^T + bp))
    h.Linear(pool, bf16, a.cls_pre, a.cls_in, kPoolw, kPoolb, 0, C, C, C);
    if (FamilyOf(s.arch).classify_pooling == Pooling::kFirstTanh) {
      kernels::TanhForward(pool, a.cls_out, a.cls_pre, BC);
    } else {
      for (std::size_t i = 0; i < BC; ++i) a.cls_out[i] = std::max(a.cls_pre[i], 0.f);
    }
    if (drop.p > 0) {
      kernels::DropoutForward(pool, a.cls_out, a.cls_out, BC, drop.p, drop.seed, drop.offset);
    }
    feature = a.cls_out;
  }
  h.Linear(pool, bf16, a.logits, feature, kHeadw, HeadBias(n), 0, C, K, K);
  if (!with_loss) return 0.0;
  double sum = 0;  // in row order: the same for any pool size
  for (int b = 0; b < B; ++b) {
    sum += RowLoss(s.problem, a.logits + static_cast<std::size_t>(b) * K, K, a.starts[b],
                   a.label_values + static_cast<std::size_t>(b) * K, nullptr, 0.f);
  }
  return sum;
}

void ClassifyBackward(WorkerPool& pool, const Net& n, Activations& a, float* dx,
                      const Bf16Operands* bf16, float dloss, bool accumulate,
                      const HeadDropout& drop) {
  const Shape& s = n.s;
  const int B = n.B, C = n.C, K = s.labels;
  const std::size_t BC = static_cast<std::size_t>(B) * C;
  for (int b = 0; b < B; ++b) {  // dlogits in place
    float* l = a.logits + static_cast<std::size_t>(b) * K;
    RowLoss(s.problem, l, K, a.starts[b], a.label_values + static_cast<std::size_t>(b) * K, l,
            dloss);
  }
  const Net h = HeadNet(n);
  const Tensor bias = HeadBias(n);
  if (Pooled(s)) {
    h.LinearBack(pool, bf16, a.cls_dout, kHeadw, bias, 0, a.logits, a.cls_out, C, K, K, accumulate);
    if (drop.p > 0) {
      kernels::DropoutBackward(pool, a.cls_dout, a.cls_dout, BC, drop.p, drop.seed, drop.offset);
    }
    if (FamilyOf(s.arch).classify_pooling == Pooling::kFirstTanh) {
      // cls_out holds the dropped tanh the classifier read: tanh itself again, for its derivative.
      if (drop.p > 0) kernels::TanhForward(pool, a.cls_out, a.cls_pre, BC);
      kernels::TanhBackward(pool, a.cls_dout, a.cls_out, a.cls_dout, BC);
    } else {
      for (std::size_t i = 0; i < BC; ++i) a.cls_dout[i] = a.cls_pre[i] > 0 ? a.cls_dout[i] : 0;
    }
    h.LinearBack(pool, bf16, a.cls_din, kPoolw, kPoolb, 0, a.cls_dout, a.cls_in, C, C, C,
                 accumulate);
  } else {
    h.LinearBack(pool, bf16, a.cls_din, kHeadw, bias, 0, a.logits, a.cls_in, C, K, K, accumulate);
  }
  ZeroFill(pool, dx, n.N * C);
  for (int b = 0; b < B; ++b) {
    const float* d = a.cls_din + static_cast<std::size_t>(b) * C;
    std::copy(d, d + C, dx + n.Pos(b, a.ends[b]) * C);
  }
}

}  // namespace cputrain::model
