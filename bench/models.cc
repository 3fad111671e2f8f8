#include "bench/models.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "common/error.h"
#include "model/presets.h"
#include "train/trainer.h"

namespace cputrain::bench {

std::string ModelPreset::Describe() const {
  const model::Shape& s = shape;
  std::string d = fmt::format("{} L={} C={} NH={}", model::ArchName(s.arch), s.L, s.C, s.NH);
  if (s.kv_heads() != s.NH) d += fmt::format(" NKV={}", s.kv_heads());
  if (s.ffn() != 4 * s.C) d += fmt::format(" F={}", s.ffn());
  if (s.HD > 0) d += fmt::format(" HD={}", s.HD);
  if (s.types > 0) d += fmt::format(" types={}", s.types);
  if (s.head != model::Head::kLm) d += fmt::format(" head={}", model::HeadName(s.head));
  return d + fmt::format(" V={} B={} T={}", s.V, B, T);
}

namespace {
// A float key as the decimal it was written as (1e-12f as 1e-12, not 9.99999996e-13: the
// config's bounds are decimals).
double Decimal(float x) { return std::stod(fmt::format("{}", x)); }
}  // namespace

void ModelPreset::ApplyTo(Config* config) const {
  const model::Shape& s = shape;
  ModelConfig& m = config->model;
  m.init_from.clear();
  // A named preset's whole shape (windows and Gemma's scalars too, which no other key sets);
  // the keys below describe it all the same.
  m.preset = model::FindPreset(name) ? name : "";
  m.arch = model::ArchName(s.arch);
  m.layers = s.L;
  m.channels = s.C;
  m.heads = s.NH;
  m.kv_heads = s.kv_heads();
  m.ffn_hidden = s.ffn();
  m.head_dim = s.HD;
  // An encoder's keys (train::ShapeFromConfig reads them for BERT and DistilBERT). The config
  // has no key for the padding token or DistilBERT's qa_dropout: a random init from it has
  // neither (one row of the embedding gradient zeroed, one dropout pass over (B,T,C) a step).
  m.head = model::HeadName(s.head);
  if (s.head == model::Head::kClassify) {  // a classifier's outputs, loss and padding token
    m.num_labels = s.labels;
    m.problem_type = model::ProblemName(s.problem);
    m.pad_token_id = s.encoder() ? -1 : s.pad_token;
  }
  m.token_types = s.types > 0 ? s.types : m.token_types;
  m.hidden_dropout = Decimal(s.hidden_dropout);
  m.attention_dropout = Decimal(s.attn_dropout);
  m.vocab_size = s.V;
  m.max_seq_len = s.maxT;
  m.norm_eps = Decimal(s.norm_eps);
  m.rope_theta = s.rope_theta;
  m.tied_embeddings = s.tied;
  const model::RopeScaling& r = s.rope_scaling;
  m.rope_scaling = r.kind == model::RopeScaling::kLlama3   ? "llama3"
                   : r.kind == model::RopeScaling::kLinear ? "linear"
                                                           : "none";
  m.rope_factor = r.factor;
  m.rope_low_freq_factor = r.low_freq_factor;
  m.rope_high_freq_factor = r.high_freq_factor;
  m.rope_original_max_position = r.original_max_position;
  config->data.batch_size = B;
  config->data.seq_len = T;
}

std::string ModelNames() { return model::PresetNames() + ", config"; }

ModelPreset ResolveModel(const std::string& name, const Config& config) {
  if (const model::Preset* p = model::FindPreset(name)) return {p->name, p->shape, p->B, p->T};
  if (name == "config") {
    if (!config.model.init_from.empty()) {
      throw InputError(
          "--model config: the config starts from a checkpoint (model.init_from), whose shape "
          "the benchmark does not read",
          "give the shape with --set model.layers=... or pick a preset: " + ModelNames());
    }
    model::Shape s = train::ShapeFromConfig(config.model);
    s.maxT = std::max(s.maxT, config.data.seq_len);
    return {"config", s, config.data.batch_size, config.data.seq_len};
  }
  throw InputError(fmt::format("unknown model '{}'", name), "use one of: " + ModelNames());
}

}  // namespace cputrain::bench
