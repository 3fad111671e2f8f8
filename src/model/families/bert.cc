// BERT and DistilBERT: encoder families (Devlin et al. 2019; Sanh et al. 2019). Learned
// positions (BERT also token types) summed and LayerNormed, post-norm blocks with bidirectional
// attention over each row's unpadded keys, exact (erf) GELU, every linear layer with a bias,
// LayerNorm eps 1e-12; dropout after the embeddings, on the attention probabilities, and before
// each residual add (DistilBERT: not after attention's output); no final norm. A task head sits
// on top (Shape::head): question answering's start|end Linear(C, 2), or classification.
//
// Hugging Face: BertForQuestionAnswering / DistilBertForQuestionAnswering (the body under
// "bert." / "distilbert.", which BertModel saves lack), and BertForSequenceClassification (the
// pooler part of the body, "bert.pooler.dense") / DistilBertForSequenceClassification
// (pre_classifier + ReLU + classifier: its pre_classifier is our pooler tensor; model/head.h).
// query, key and value are the row parts of our fused qkvw, as Llama's q/k/v_proj; no tensor is
// transposed. A pretraining checkpoint (BertForPreTraining, BertForMaskedLM,
// DistilBertForMaskedLM) loads too: its heads are dropped with a note and the task head is
// initialized, as transformers does. Old TF-converted names (LayerNorm.gamma/beta) are read
// as weight/bias (model/hf.cc).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "model/family.h"
#include "model/head.h"
#include "model/hf_config.h"
#include "model/limits.h"

namespace cputrain::model {
namespace {

using nlohmann::json;

std::vector<TensorInfo> EncoderTensors(const Shape& s) {
  auto dim = [](int d) { return static_cast<std::size_t>(std::max(d, 0)); };
  const std::size_t C = dim(s.C), Vp = dim(s.Vp), V = dim(s.V), F = dim(s.ffn());
  const std::size_t maxT = dim(s.maxT), H = dim(s.head_width());
  constexpr bool L = true, D = true;  // per layer, weight decay
  using I = Init;
  std::vector<TensorInfo> t = {
      MakeTensor(kWte, "word_embeddings", !L, D, I::kNormal, {Vp, C}, V),
      MakeTensor(kWpe, "position_embeddings", !L, D, I::kNormal, {maxT, C})};
  if (s.types > 0) {
    t.push_back(MakeTensor(kWtt, "token_type_embeddings", !L, D, I::kNormal, {dim(s.types), C}));
  }
  t.push_back(MakeTensor(kLnEw, "emb_norm_w", !L, !D, I::kOnes, {C}));
  t.push_back(MakeTensor(kLnEb, "emb_norm_b", !L, !D, I::kZeros, {C}));
  t.push_back(MakeTensor(kQkvw, "qkvw", L, D, I::kNormal, {3 * C, C}));
  t.push_back(MakeTensor(kQkvb, "qkvb", L, !D, I::kZeros, {3 * C}));
  t.push_back(MakeTensor(kAttprojw, "attn_out", L, D, I::kNormal, {C, C}));
  t.push_back(MakeTensor(kAttprojb, "attn_out_b", L, !D, I::kZeros, {C}));
  t.push_back(MakeTensor(kLn1w, "attn_norm_w", L, !D, I::kOnes, {C}));
  t.push_back(MakeTensor(kLn1b, "attn_norm_b", L, !D, I::kZeros, {C}));
  t.push_back(MakeTensor(kFcw, "mlp_in", L, D, I::kNormal, {F, C}));
  t.push_back(MakeTensor(kFcb, "mlp_in_b", L, !D, I::kZeros, {F}));
  t.push_back(MakeTensor(kFcprojw, "mlp_out", L, D, I::kNormal, {C, F}));
  t.push_back(MakeTensor(kFcprojb, "mlp_out_b", L, !D, I::kZeros, {C}));
  t.push_back(MakeTensor(kLn2w, "mlp_norm_w", L, !D, I::kOnes, {C}));
  t.push_back(MakeTensor(kLn2b, "mlp_norm_b", L, !D, I::kZeros, {C}));
  if (s.head == Head::kClassify) {
    t.push_back(MakeTensor(kPoolw, "pooler", !L, D, I::kNormal, {C, C}));
    t.push_back(MakeTensor(kPoolb, "pooler_b", !L, !D, I::kZeros, {C}));
  }
  t.push_back(MakeTensor(kHeadw, "head", !L, D, I::kNormal, {H, C}));
  t.push_back(MakeTensor(kHeadb, "head_b", !L, !D, I::kZeros, {H}));
  return t;
}

// A probability key in [0, 1) (missing or null: fallback).
float ProbKey(const json& cfg, const std::string& key, const std::string& path, double fallback) {
  if (!cfg.contains(key) || cfg[key].is_null()) return static_cast<float>(fallback);
  const json& v = cfg[key];
  if (!v.is_number() || !(v.get<double>() >= 0 && v.get<double>() < 1)) {
    hf::BadConfig(path, fmt::format("{} is {}, not a probability in [0, 1)", key, v.dump()),
                  "fix config.json");
  }
  return static_cast<float>(v.get<double>());
}

// The dimensions both families share under their own key names.
struct Keys {
  const char *hidden, *layers, *heads, *ffn, *act, *dropout, *attn_dropout;
};

Shape EncoderFromHf(const json& cfg, const std::string& path, Arch arch, const Keys& k,
                    const char* family) {
  hf::FixedKey(cfg, k.act, {"gelu"}, path, family);
  hf::FixedKey(cfg, "is_decoder", {false}, path, family);
  hf::FixedKey(cfg, "add_cross_attention", {false}, path, family);
  hf::FixedKey(cfg, "position_embedding_type", {"absolute"}, path, family);
  hf::FixedKey(cfg, "sinusoidal_pos_embds", {false}, path, family);
  Shape s;
  s.arch = arch;
  s.C = hf::IntKey(cfg, k.hidden, path, kMaxChannels);
  s.L = hf::IntKey(cfg, k.layers, path, kMaxLayers);
  s.NH = hf::IntKey(cfg, k.heads, path, kMaxChannels);
  s.F = hf::IntKey(cfg, k.ffn, path, 4 * kMaxChannels);
  s.V = hf::IntKey(cfg, "vocab_size", path, kMaxVocab);
  s.maxT = hf::IntKey(cfg, "max_position_embeddings", path, kMaxSeqLen);
  s.Vp = Shape::PadVocab(s.V);
  s.hidden_dropout = ProbKey(cfg, k.dropout, path, 0.1);
  s.attn_dropout = ProbKey(cfg, k.attn_dropout, path, 0.1);
  s.attn_bias = s.mlp_bias = true;
  s.tied = false;
  if (cfg.contains("pad_token_id") && cfg["pad_token_id"].is_number_integer()) {
    s.pad_token = static_cast<int>(
        std::clamp<long long>(cfg["pad_token_id"].get<long long>(), -1, kMaxVocab));
  } else if (!cfg.contains("pad_token_id")) {
    s.pad_token = 0;  // BertConfig's and DistilBertConfig's default
  }
  ReadHfHead(cfg, path, &s);  // the task head its architectures name (model/head.h)
  return s;
}

Shape BertFromHf(const json& cfg, const std::string& path) {
  Shape s =
      EncoderFromHf(cfg, path, Arch::kBert,
                    {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob"},
                    "BERT");
  s.types = hf::IntKey(cfg, "type_vocab_size", path, kMaxTypes, 2);
  s.norm_eps = static_cast<float>(hf::FloatKey(cfg, "layer_norm_eps", path, 1e-12));
  // BertForQuestionAnswering puts no dropout before qa_outputs; the classifier's is
  // classifier_dropout, else hidden_dropout_prob.
  s.head_dropout =
      s.head == Head::kClassify ? ProbKey(cfg, "classifier_dropout", path, s.hidden_dropout) : 0;
  return s;
}

Shape DistilBertFromHf(const json& cfg, const std::string& path) {
  Shape s = EncoderFromHf(
      cfg, path, Arch::kDistilBert,
      {"dim", "n_layers", "n_heads", "hidden_dim", "activation", "dropout", "attention_dropout"},
      "DistilBERT");
  s.norm_eps = 1e-12f;  // fixed in DistilBERT's modeling code
  s.head_dropout = s.head == Head::kClassify ? ProbKey(cfg, "seq_classif_dropout", path, 0.2)
                                             : ProbKey(cfg, "qa_dropout", path, 0.1);
  return s;
}

std::string DistilBertProblem(const Shape& s) {
  return s.kv_heads() != s.NH || s.HD != 0 || s.window != 0
             ? "BERT-style encoders have NKV = NH, head size C/NH and no window"
             : "";
}

std::string BertProblem(const Shape& s) {
  if (s.types < 1) return "BERT has at least one token type";
  return DistilBertProblem(s);
}

// model.*: an encoder with every bias, untied, the post-norm LayerNorm's eps and the dropouts
// from the config (BERT also its token types); no KV heads or rotary embeddings.
Shape EncoderFromConfig(const Shape& k, int types) {
  Shape s{k.maxT, k.V, k.Vp, k.L, k.NH, k.C};
  s.arch = k.arch;
  s.head = k.head;
  s.F = k.F;
  s.norm_eps = k.norm_eps;
  s.types = types;
  s.tied = false;
  s.hidden_dropout = k.hidden_dropout;
  s.attn_dropout = k.attn_dropout;
  return s;
}
Shape BertFromConfig(const Shape& k) { return EncoderFromConfig(k, k.types); }
Shape DistilBertFromConfig(const Shape& k) { return EncoderFromConfig(k, 0); }

// A BERT-shaped encoder with a span head (question answering), as transformers' config defaults
// make it: every bias, untied, maxT 512 positions, LayerNorm eps 1e-12, pad token 0, dropout
// 0.1 on the hidden states and the attention probabilities; B and T are run_qa.py's recipe
// (--per_device_train_batch_size 12 --max_seq_length 384).
Preset EncoderPreset(const char* name, Arch arch, int L, int B, int T, Head head = Head::kSpan) {
  Shape s{512, 30522, Shape::PadVocab(30522), L, 12, 768};
  s.arch = arch;
  s.F = 3072;
  s.norm_eps = 1e-12f;
  s.tied = false;
  s.head = head;
  s.labels = head == Head::kClassify ? 2 : 0;  // a binary classifier (SST-2, MRPC)
  s.types = arch == Arch::kBert ? 2 : 0;       // BertConfig.type_vocab_size; DistilBERT has none
  s.pad_token = 0;
  s.hidden_dropout = s.attn_dropout = 0.1f;
  // BertForQuestionAnswering has no dropout before qa_outputs; DistilBERT's qa_dropout is 0.1;
  // BertForSequenceClassification's classifier_dropout is hidden_dropout_prob's.
  s.head_dropout = arch == Arch::kDistilBert || head == Head::kClassify ? 0.1f : 0.f;
  return {name, s, B, T};
}

// Hugging Face writes the probabilities as the decimals they were given.
double Decimal(float x) { return std::stod(fmt::format("{}", x)); }

const char* Architecture(const Shape& s) {
  const Family& f = FamilyOf(s.arch);
  return s.head == Head::kClassify ? f.hf_classify_architecture : f.hf_span_architecture;
}

json BertToHf(const Shape& s) {
  json cfg = {{"architectures", {Architecture(s)}},
              {"attention_probs_dropout_prob", Decimal(s.attn_dropout)},
              {"classifier_dropout", nullptr},
              {"hidden_act", "gelu"},
              {"hidden_dropout_prob", Decimal(s.hidden_dropout)},
              {"hidden_size", s.C},
              {"initializer_range", 0.02},
              {"intermediate_size", s.ffn()},
              {"layer_norm_eps", Decimal(s.norm_eps)},
              {"max_position_embeddings", s.maxT},
              {"model_type", "bert"},
              {"num_attention_heads", s.NH},
              {"num_hidden_layers", s.L},
              {"pad_token_id", s.pad_token >= 0 ? json(s.pad_token) : json(nullptr)},
              {"position_embedding_type", "absolute"},
              {"torch_dtype", "float32"},
              {"type_vocab_size", s.types},
              {"use_cache", true},
              {"vocab_size", s.V}};
  if (s.head == Head::kClassify && s.head_dropout != s.hidden_dropout) {
    cfg["classifier_dropout"] = Decimal(s.head_dropout);
  }
  return cfg;
}

json DistilBertToHf(const Shape& s) {
  return {{"activation", "gelu"},
          {"architectures", {Architecture(s)}},
          {"attention_dropout", Decimal(s.attn_dropout)},
          {"dim", s.C},
          {"dropout", Decimal(s.hidden_dropout)},
          {"hidden_dim", s.ffn()},
          {"initializer_range", 0.02},
          {"max_position_embeddings", s.maxT},
          {"model_type", "distilbert"},
          {"n_heads", s.NH},
          {"n_layers", s.L},
          {"pad_token_id", s.pad_token >= 0 ? json(s.pad_token) : json(nullptr)},
          {"qa_dropout", s.head == Head::kSpan ? Decimal(s.head_dropout) : 0.1},
          {"seq_classif_dropout", s.head == Head::kClassify ? Decimal(s.head_dropout) : 0.2},
          {"sinusoidal_pos_embds", false},
          {"tie_weights_", true},
          {"torch_dtype", "float32"},
          {"vocab_size", s.V}};
}

constexpr int kSpan = static_cast<int>(Head::kSpan), kClassify = static_cast<int>(Head::kClassify);

}  // namespace

extern const Family kBertFamily = {
    .name = "bert",
    .arch = Arch::kBert,
    .kind = {.encoder = true, .gelu_erf = true, .attn_out_dropout = true},
    .tensors = EncoderTensors,
    .problem = BertProblem,
    .from_config = BertFromConfig,
    .hf_model_type = "bert",
    .hf_architecture = "BertForQuestionAnswering",
    .from_hf_config = BertFromHf,
    .to_hf_config = BertToHf,
    .hf_tensors = {{kWte, "embeddings.word_embeddings.weight"},
                   {kWpe, "embeddings.position_embeddings.weight"},
                   {kWtt, "embeddings.token_type_embeddings.weight"},
                   {kLnEw, "embeddings.LayerNorm.weight"},
                   {kLnEb, "embeddings.LayerNorm.bias"},
                   {kQkvw, "encoder.layer.{}.attention.self.query.weight", HfTensor::kQ},
                   {kQkvw, "encoder.layer.{}.attention.self.key.weight", HfTensor::kK},
                   {kQkvw, "encoder.layer.{}.attention.self.value.weight", HfTensor::kV},
                   {kQkvb, "encoder.layer.{}.attention.self.query.bias", HfTensor::kQ},
                   {kQkvb, "encoder.layer.{}.attention.self.key.bias", HfTensor::kK},
                   {kQkvb, "encoder.layer.{}.attention.self.value.bias", HfTensor::kV},
                   {kAttprojw, "encoder.layer.{}.attention.output.dense.weight"},
                   {kAttprojb, "encoder.layer.{}.attention.output.dense.bias"},
                   {kLn1w, "encoder.layer.{}.attention.output.LayerNorm.weight"},
                   {kLn1b, "encoder.layer.{}.attention.output.LayerNorm.bias"},
                   {kFcw, "encoder.layer.{}.intermediate.dense.weight"},
                   {kFcb, "encoder.layer.{}.intermediate.dense.bias"},
                   {kFcprojw, "encoder.layer.{}.output.dense.weight"},
                   {kFcprojb, "encoder.layer.{}.output.dense.bias"},
                   {kLn2w, "encoder.layer.{}.output.LayerNorm.weight"},
                   {kLn2b, "encoder.layer.{}.output.LayerNorm.bias"},
                   {kPoolw, "pooler.dense.weight"},
                   {kPoolb, "pooler.dense.bias"},
                   {kHeadw, "qa_outputs.weight", HfTensor::kAll, false, kSpan},
                   {kHeadb, "qa_outputs.bias", HfTensor::kAll, false, kSpan},
                   {kHeadw, "classifier.weight", HfTensor::kAll, false, kClassify},
                   {kHeadb, "classifier.bias", HfTensor::kAll, false, kClassify}},
    .hf_optional_prefix = "bert.",
    .hf_ignored_suffixes = {".position_ids"},
    .hf_dropped_prefixes = {"cls.", "bert.pooler.", "pooler.", "qa_outputs.", "classifier."},
    .hf_span_architecture = "BertForQuestionAnswering",
    .hf_classify_architecture = "BertForSequenceClassification",
    .classify_pooling = Pooling::kFirstTanh,
    .lora_default_targets = {"query", "value"},
    // bert-base-uncased with a span head (BertForQuestionAnswering).
    .presets = {EncoderPreset("bert-base-qa", Arch::kBert, 12, 12, 384),
                // bert-base-uncased with a classifier (BertForSequenceClassification): GLUE's
                // usual batch and length (run_glue.py --per_device_train_batch_size 32
                // --max_seq_length 128)
                EncoderPreset("bert-base-cls", Arch::kBert, 12, 32, 128, Head::kClassify)},
};

extern const Family kDistilBertFamily = {
    .name = "distilbert",
    .arch = Arch::kDistilBert,
    .kind = {.encoder = true, .gelu_erf = true, .attn_out_dropout = false},
    .tensors = EncoderTensors,
    .problem = DistilBertProblem,
    .from_config = DistilBertFromConfig,
    .hf_model_type = "distilbert",
    .hf_architecture = "DistilBertForQuestionAnswering",
    .from_hf_config = DistilBertFromHf,
    .to_hf_config = DistilBertToHf,
    .hf_tensors = {{kWte, "embeddings.word_embeddings.weight"},
                   {kWpe, "embeddings.position_embeddings.weight"},
                   {kLnEw, "embeddings.LayerNorm.weight"},
                   {kLnEb, "embeddings.LayerNorm.bias"},
                   {kQkvw, "transformer.layer.{}.attention.q_lin.weight", HfTensor::kQ},
                   {kQkvw, "transformer.layer.{}.attention.k_lin.weight", HfTensor::kK},
                   {kQkvw, "transformer.layer.{}.attention.v_lin.weight", HfTensor::kV},
                   {kQkvb, "transformer.layer.{}.attention.q_lin.bias", HfTensor::kQ},
                   {kQkvb, "transformer.layer.{}.attention.k_lin.bias", HfTensor::kK},
                   {kQkvb, "transformer.layer.{}.attention.v_lin.bias", HfTensor::kV},
                   {kAttprojw, "transformer.layer.{}.attention.out_lin.weight"},
                   {kAttprojb, "transformer.layer.{}.attention.out_lin.bias"},
                   {kLn1w, "transformer.layer.{}.sa_layer_norm.weight"},
                   {kLn1b, "transformer.layer.{}.sa_layer_norm.bias"},
                   {kFcw, "transformer.layer.{}.ffn.lin1.weight"},
                   {kFcb, "transformer.layer.{}.ffn.lin1.bias"},
                   {kFcprojw, "transformer.layer.{}.ffn.lin2.weight"},
                   {kFcprojb, "transformer.layer.{}.ffn.lin2.bias"},
                   {kLn2w, "transformer.layer.{}.output_layer_norm.weight"},
                   {kLn2b, "transformer.layer.{}.output_layer_norm.bias"},
                   {kHeadw, "qa_outputs.weight", HfTensor::kAll, false, kSpan},
                   {kHeadb, "qa_outputs.bias", HfTensor::kAll, false, kSpan},
                   {kPoolw, "pre_classifier.weight", HfTensor::kAll, false, kClassify},
                   {kPoolb, "pre_classifier.bias", HfTensor::kAll, false, kClassify},
                   {kHeadw, "classifier.weight", HfTensor::kAll, false, kClassify},
                   {kHeadb, "classifier.bias", HfTensor::kAll, false, kClassify}},
    .hf_optional_prefix = "distilbert.",
    .hf_ignored_suffixes = {".position_ids"},
    .hf_dropped_prefixes = {"vocab_transform.", "vocab_layer_norm.", "vocab_projector.",
                            "qa_outputs.", "pre_classifier.", "classifier."},
    .hf_span_architecture = "DistilBertForQuestionAnswering",
    .hf_classify_architecture = "DistilBertForSequenceClassification",
    .classify_pooling = Pooling::kFirstRelu,
    .lora_default_targets = {"q_lin", "v_lin"},
    // distilbert-base-uncased with a span head (DistilBertForQuestionAnswering).
    .presets = {EncoderPreset("distilbert-qa", Arch::kDistilBert, 6, 12, 384)},
};

}  // namespace cputrain::model
