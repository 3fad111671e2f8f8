#include "model/shape.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/family.h"
#include "model/head.h"
#include "model/limits.h"

namespace cputrain::model {

const char* ArchName(Arch a) { return FamilyOf(a).name; }

Arch ArchFromName(const std::string& name) {
  if (const Family* f = FindFamily(name)) return f->arch;
  throw InputError(fmt::format("unknown model family '{}'", name), "use one of: " + FamilyNames());
}

namespace {
constexpr const char* kHeadNames[] = {"lm", "qa", "classify"};
constexpr const char* kProblemNames[] = {"single_label_classification", "regression",
                                         "multi_label_classification"};
}  // namespace

const char* ProblemName(ProblemType p) { return kProblemNames[static_cast<int>(p)]; }

ProblemType ProblemFromName(const std::string& name) {
  for (int i = 0; i < 3; ++i)
    if (name == kProblemNames[i]) return static_cast<ProblemType>(i);
  throw InputError(fmt::format("unknown problem_type '{}'", name),
                   "use one of: single_label_classification, regression, "
                   "multi_label_classification");
}

const char* HeadName(Head h) { return kHeadNames[static_cast<int>(h)]; }

Head HeadFromName(const std::string& name) {
  for (int i = 0; i < 3; ++i)
    if (name == kHeadNames[i]) return static_cast<Head>(i);
  throw InputError(fmt::format("unknown model head '{}'", name), "use one of: lm, qa, classify");
}

bool Shape::operator==(const Shape& o) const {
  return maxT == o.maxT && V == o.V && Vp == o.Vp && L == o.L && NH == o.NH && C == o.C &&
         arch == o.arch && kv_heads() == o.kv_heads() && ffn() == o.ffn() &&
         head_size() == o.head_size() && window == o.window &&
         (window == 0 || (window_from == o.window_from && global_every == o.global_every)) &&
         rope_local_theta == o.rope_local_theta && attn_scalar == o.attn_scalar &&
         norm_eps == o.norm_eps && rope_theta == o.rope_theta && rope_scaling == o.rope_scaling &&
         tied == o.tied && attn_bias == o.attn_bias && mlp_bias == o.mlp_bias && types == o.types &&
         head == o.head && labels == o.labels && pad_token == o.pad_token &&
         (head != Head::kClassify || problem == o.problem);
}

bool Shape::encoder() const { return FamilyOf(arch).kind.encoder; }

int Shape::mlp_in_width() const {
  const BlockKind& k = FamilyOf(arch).kind;
  return k.swiglu || k.geglu ? 2 * ffn() : ffn();
}

int Shape::head_width() const {
  switch (head) {
    case Head::kLm:
      return Vp;
    case Head::kSpan:
      return 2;
    case Head::kClassify:
      return labels;
  }
  return 0;
}

std::string Shape::ToString() const {
  std::string s = fmt::format("L={} C={} NH={} V={} (padded {}) maxT={}", L, C, NH, V, Vp, maxT);
  if (FamilyOf(arch).llmc) return s;  // GPT-2's shape is these six
  if (encoder()) {
    s += fmt::format(" {} F={} types={} head={}", ArchName(arch), ffn(), types, HeadName(head));
    if (head == Head::kClassify) s += fmt::format(" labels={}", labels);
    return s;
  }
  s += fmt::format(" {} NKV={} F={}", ArchName(arch), kv_heads(), ffn());
  if (HD > 0) s += fmt::format(" HD={}", HD);
  if (window > 0) {
    s += fmt::format(" window={}", window);
    if (window_from > 0) s += fmt::format(" from layer {}", window_from);
    if (global_every > 0) s += fmt::format(" (every {}th layer global)", global_every);
  }
  if (!tied) s += " untied";
  return s;
}

std::string Shape::Problem() const {
  struct Dim {
    const char* name;
    int value, max;
  };
  // NH <= C keeps the head size >= 1; the MLP width is bounded as the channels are.
  for (const Dim& d :
       {Dim{"maxT", maxT, kMaxSeqLen}, Dim{"V", V, kMaxVocab}, Dim{"Vp", Vp, kMaxVocab},
        Dim{"L", L, kMaxLayers}, Dim{"C", C, kMaxChannels}, Dim{"NH", NH, C},
        Dim{"NKV", kv_heads(), NH}, Dim{"F", F > 0 ? F : 1, 4 * kMaxChannels},
        Dim{"HD", HD > 0 ? HD : 1, kMaxChannels},
        Dim{"window", window > 0 ? window : 1, kMaxSeqLen}}) {
    if (d.value < 1 || d.value > d.max) {
      return fmt::format("{} is {}: it must be in [1, {}]", d.name, d.value, d.max);
    }
  }
  if (NKV < 0) return fmt::format("NKV is {}: it must be in [1, NH]", NKV);
  if (HD < 0 || window < 0) return "the head size and the window are not negative";
  if (window_from < 0 || window_from > L || global_every < 0 || global_every > L + 1) {
    return fmt::format("the windowed layers (from {}, every {}th global) are not layers of {}",
                       window_from, global_every, L);
  }
  if (HD == 0 && C % NH != 0) return fmt::format("NH ({}) does not divide C ({})", NH, C);
  if (static_cast<long long>(NH + 2LL * kv_heads()) * head_size() > 4LL * kMaxChannels) {
    return fmt::format("the q|k|v width (NH + 2 NKV) * head size = {} is above {}",
                       static_cast<long long>(NH + 2LL * kv_heads()) * head_size(),
                       4 * kMaxChannels);
  }
  if (NH % kv_heads() != 0) {
    return fmt::format("NKV ({}) does not divide NH ({})", kv_heads(), NH);
  }
  if (Vp < V) return fmt::format("the padded vocabulary Vp ({}) is smaller than V ({})", Vp, V);
  if (!(norm_eps > 0) || !std::isfinite(norm_eps)) {
    return fmt::format("the norm epsilon {} is not a positive number", norm_eps);
  }
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) {
    return fmt::format("rope_theta {} is not a positive number", rope_theta);
  }
  for (float x : {rope_local_theta, attn_scalar}) {
    if (!(x >= 0) || !std::isfinite(x)) {
      return fmt::format("rope_local_theta and attn_scalar are 0 or positive ({})", x);
    }
  }
  const RopeScaling& r = rope_scaling;
  if (r.kind == RopeScaling::kLinear && (!(r.factor > 0) || !std::isfinite(r.factor))) {
    return "rope_scaling linear needs a positive factor";
  }
  if (r.kind == RopeScaling::kLlama3 &&
      (!(r.factor >= 1) || !(r.low_freq_factor > 0) || !(r.high_freq_factor > r.low_freq_factor) ||
       !std::isfinite(r.factor) || !std::isfinite(r.high_freq_factor) ||
       r.original_max_position < 1)) {
    return "rope_scaling llama3 needs factor >= 1, 0 < low_freq_factor < high_freq_factor and "
           "original_max_position_embeddings >= 1";
  }
  if (encoder() && head == Head::kLm) {
    return fmt::format("{} runs with a task head (qa or classify), not an LM head", ArchName(arch));
  }
  if (!encoder() && head == Head::kSpan) {
    return fmt::format("{} runs with its LM head or a classifier, not a span head", ArchName(arch));
  }
  if (types < 0 || types > kMaxTypes) {
    return fmt::format("the token types are {}: they must be in [0, {}]", types, kMaxTypes);
  }
  if (pad_token < -1 || pad_token >= V) {
    return fmt::format("the padding token {} is not an id below V = {}", pad_token, V);
  }
  if (head == Head::kClassify) {
    if (*FamilyOf(arch).hf_classify_architecture == '\0') {
      return fmt::format("{} has no sequence classifier here", ArchName(arch));
    }
    if (labels < 1 || labels > kMaxLabels) {
      return fmt::format("the labels are {}: a classifier has [1, {}]", labels, kMaxLabels);
    }
    if (problem == ProblemType::kSingleLabel && labels < 2) {
      return "a single-label classifier has 2 or more labels (one output is a regression)";
    }
    if (!encoder() && pad_token < 0) {
      return fmt::format(
          "a {} classifier finds each row's last token by the padding token, and "
          "there is none (config.json's pad_token_id)",
          ArchName(arch));
    }
  }
  for (float p : {hidden_dropout, attn_dropout, head_dropout}) {
    if (!(p >= 0 && p < 1))
      return fmt::format("a dropout probability is {}: it must be in [0, 1)", p);
  }
  if (head_size() % 2 != 0 && FamilyOf(arch).kind.rope) {
    return fmt::format("the head size {} is odd: rotary embeddings need it even", head_size());
  }
  if (const auto problem = FamilyOf(arch).problem) {
    if (std::string p = problem(*this); !p.empty()) return p;
  }
  // Every dimension is bounded now, so the count below cannot overflow (model/limits.h).
  const std::uint64_t n = ParamCount();
  if (n > kMaxParams) {
    return fmt::format("{} parameters are more than the {} (2^40) this build addresses", n,
                       kMaxParams);
  }
  return "";
}

std::uint64_t Shape::ParamCount() const {
  std::uint64_t total = 0;
  for (const TensorInfo& info : ModelTensors(*this)) {
    std::uint64_t n = 0;
    const bool overflow =
        __builtin_mul_overflow(info.numel, info.per_layer ? std::uint64_t(L) : 1, &n) ||
        __builtin_add_overflow(total, n, &total);
    CPUTRAIN_CHECK(!overflow, "parameter count of " + ToString() + " overflows");
  }
  return total;
}

nlohmann::json ShapeToJson(const Shape& s) {
  const RopeScaling& r = s.rope_scaling;
  return {{"arch", ArchName(s.arch)},
          {"max_seq_len", s.maxT},
          {"vocab_size", s.V},
          {"padded_vocab_size", s.Vp},
          {"layers", s.L},
          {"heads", s.NH},
          {"channels", s.C},
          {"kv_heads", s.kv_heads()},
          {"ffn_hidden", s.ffn()},
          {"norm_eps", s.norm_eps},
          {"rope_theta", s.rope_theta},
          {"rope_scaling",
           {{"kind", static_cast<int>(r.kind)},
            {"factor", r.factor},
            {"low_freq_factor", r.low_freq_factor},
            {"high_freq_factor", r.high_freq_factor},
            {"original_max_position", r.original_max_position}}},
          {"tied", s.tied},
          {"head_dim", s.HD},
          {"window", s.window},
          {"window_from", s.window_from},
          {"global_every", s.global_every},
          {"rope_local_theta", s.rope_local_theta},
          {"attn_scalar", s.attn_scalar},
          {"attn_bias", s.attn_bias},
          {"mlp_bias", s.mlp_bias},
          {"types", s.types},
          {"head", HeadName(s.head)},
          {"labels", s.labels},
          {"problem_type", ProblemName(s.problem)},
          {"pad_token", s.pad_token},
          {"hidden_dropout", s.hidden_dropout},
          {"attn_dropout", s.attn_dropout},
          {"head_dropout", s.head_dropout}};
}

Shape ShapeFromJson(const nlohmann::json& j) {
  Shape s{j.at("max_seq_len").get<int>(),
          j.at("vocab_size").get<int>(),
          j.at("padded_vocab_size").get<int>(),
          j.at("layers").get<int>(),
          j.at("heads").get<int>(),
          j.at("channels").get<int>()};
  if (!j.contains("arch")) return s;  // a GPT-2 state.bin from before families
  s.arch = ArchFromName(j.at("arch").get<std::string>());
  s.NKV = j.at("kv_heads").get<int>();
  s.F = j.at("ffn_hidden").get<int>();
  s.norm_eps = j.at("norm_eps").get<float>();
  s.rope_theta = j.at("rope_theta").get<float>();
  const nlohmann::json& r = j.at("rope_scaling");
  const int kind = r.at("kind").get<int>();
  s.rope_scaling.kind = kind == 1   ? RopeScaling::kLlama3
                        : kind == 2 ? RopeScaling::kLinear
                                    : RopeScaling::kNone;
  s.rope_scaling.factor = r.at("factor").get<float>();
  s.rope_scaling.low_freq_factor = r.at("low_freq_factor").get<float>();
  s.rope_scaling.high_freq_factor = r.at("high_freq_factor").get<float>();
  s.rope_scaling.original_max_position = r.at("original_max_position").get<int>();
  s.tied = j.at("tied").get<bool>();
  // From before head sizes, windows and Gemma's scalars: their defaults.
  s.HD = j.value("head_dim", 0);
  s.window = j.value("window", 0);
  s.window_from = j.value("window_from", 0);
  s.global_every = j.value("global_every", 0);
  s.rope_local_theta = j.value("rope_local_theta", 0.f);
  s.attn_scalar = j.value("attn_scalar", 0.f);
  s.attn_bias = j.at("attn_bias").get<bool>();
  s.mlp_bias = j.at("mlp_bias").get<bool>();
  if (!j.contains("head")) return s;  // from before the encoder families
  s.types = j.at("types").get<int>();
  s.head = HeadFromName(j.at("head").get<std::string>());
  s.labels = j.at("labels").get<int>();
  if (j.contains("problem_type"))
    s.problem = ProblemFromName(j.at("problem_type").get<std::string>());
  s.pad_token = j.at("pad_token").get<int>();
  s.hidden_dropout = j.at("hidden_dropout").get<float>();
  s.attn_dropout = j.at("attn_dropout").get<float>();
  s.head_dropout = j.at("head_dropout").get<float>();
  return s;
}

}  // namespace cputrain::model
