// model/: a model's hyperparameters — its family (Arch) and every dimension the family's tensors
// and layers are sized by. A Shape is plain data: checkpoints, state.bin and the Hugging Face
// config.json readers all produce one, and everything else (the parameter layout, activations,
// the forward and backward passes) is derived from it and from the family's table (family.h).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "model/families.h"

namespace cputrain::model {

// The model families the engine runs: one value per line of the registry (families.h), in its
// order — Arch::kGpt2, Arch::kLlama, ... The family's table (family.h, FamilyOf) says everything
// about it; code outside src/model asks the table, never compares an Arch with a family.
enum class Arch : int {
#define CPUTRAIN_ARCH_ID(id, table) id,
  CPUTRAIN_MODEL_FAMILIES(CPUTRAIN_ARCH_ID)
#undef CPUTRAIN_ARCH_ID
};
// "gpt2", "llama", ... (the family's name); and back (InputError naming the valid names).
const char* ArchName(Arch a);
Arch ArchFromName(const std::string& name);

// What the model's last layer computes: next-token logits (the LM head; decoder families), or a
// task head over an encoder (BERT, DistilBERT): kSpan, extractive question answering's start and
// end logits per position (Hugging Face's *ForQuestionAnswering: one Linear(C, 2)); kClassify,
// one label per sequence (*ForSequenceClassification: BERT's tanh pooler over [CLS], then
// Linear(C, labels)).
enum class Head : int { kLm = 0, kSpan = 1, kClassify = 2 };
// "lm", "qa", "classify"; and back.
const char* HeadName(Head h);
Head HeadFromName(const std::string& name);

// A classifier's loss, as Hugging Face's problem_type: cross-entropy over the labels; mean squared
// error of each output (regression, usually one); binary cross-entropy of each label's logit
// (multi-label).
enum class ProblemType : int { kSingleLabel = 0, kRegression = 1, kMultiLabel = 2 };
// "single_label_classification", "regression", "multi_label_classification"; and back
// (InputError naming the valid names).
const char* ProblemName(ProblemType p);
ProblemType ProblemFromName(const std::string& name);

// The head a command reads a checkpoint with: its kind, and for a classifier how many outputs and
// which loss (unset: the checkpoint's own, or Hugging Face's defaults for a body without one). A
// checkpoint saved with another head (a pretrained body, another task's head) is read as this
// head over its body, the head's tensors new (hf.h).
struct HeadSpec {
  HeadSpec(Head h = Head::kLm) : head(h) {}  // NOLINT: a Head is the spec of that head
  Head head;
  int labels = 0;  // 0: the checkpoint's
  std::optional<ProblemType> problem;
  // A decoder classifier's padding token where config.json names none (the tokenizer's).
  int pad_token = -1;
};

// Rotary embeddings' frequency scaling (Hugging Face's rope_scaling): none, Llama 3.1's
// "llama3" (low frequencies divided by factor, high ones kept, a smooth ramp between), or
// "linear" (every frequency divided by factor: Gemma 3's global layers).
struct RopeScaling {
  enum Kind : int { kNone = 0, kLlama3 = 1, kLinear = 2 } kind = kNone;
  float factor = 1, low_freq_factor = 1, high_freq_factor = 4;
  int original_max_position = 8192;
  bool operator==(const RopeScaling&) const = default;
};

// maxT positions, V real vocabulary, Vp padded (a multiple of 128, for the kernels; files hold V
// rows), L blocks, NH query heads, C channels (the residual width; NH * head size unless HD says
// otherwise). The first six are GPT-2's whole shape (and llm.c's checkpoint header), so a GPT-2
// shape is written {maxT, V, Vp, L, NH, C}; the rest have GPT-2's values by default.
struct Shape {
  Shape() = default;
  Shape(int maxT_, int V_, int Vp_, int L_, int NH_, int C_)
      : maxT(maxT_), V(V_), Vp(Vp_), L(L_), NH(NH_), C(C_) {}

  int maxT = 0, V = 0, Vp = 0, L = 0, NH = 0, C = 0;
  Arch arch = Arch::kGpt2;
  int NKV = 0;  // key/value heads (grouped-query attention; 0: NH)
  int F = 0;    // MLP hidden width (0: 4C, GPT-2's)
  int HD = 0;  // head size (Hugging Face's head_dim: Qwen3's 128 over C = 1024 / 16 heads; 0: C/NH)
  float norm_eps = 1e-5f;
  float rope_theta = 10000.f;  // families with rotary embeddings
  RopeScaling rope_scaling;
  // Sliding-window attention: a query at position t attends keys (t - window, t] in the layers
  // that have it (windowed(l)): from layer window_from on, all of them, or with global_every > 0
  // all but every global_every-th (layers global_every - 1, 2 global_every - 1, ...: Gemma 3's
  // global layers). window 0: none (full causal attention everywhere).
  int window = 0, window_from = 0, global_every = 0;
  float rope_local_theta = 0;  // the windowed layers' RoPE base, unscaled (Gemma 3; 0: theirs is
                               // rope_theta with rope_scaling, as every layer's)
  float attn_scalar = 0;       // scores scaled by attn_scalar^-1/2 (Gemma's query_pre_attn_scalar;
                               // 0: the head size's)
  bool tied = true;            // the LM head is the token embedding
  bool attn_bias = true;       // q/k/v and attention-output biases (GPT-2: yes; Llama: config)
  bool mlp_bias = true;        // MLP biases
  int types = 0;               // token types (BERT's type_vocab_size; 0: the family has none)
  Head head = Head::kLm;
  int labels = 0;  // outputs of a kClassify head: its classes, or 1 for a regression
  ProblemType problem = ProblemType::kSingleLabel;  // a kClassify head's loss
  // The padding token's id (BERT's pad_token_id, -1: none): its embedding row gets no gradient,
  // as nn.Embedding(padding_idx) gives it none.
  int pad_token = -1;
  // Dropout probabilities while training (Hugging Face's hidden_dropout_prob,
  // attention_probs_dropout_prob, DistilBERT's qa_dropout / seq_classif_dropout): how the model
  // is trained, not what it is, so == ignores them; 0 in evaluation.
  float hidden_dropout = 0, attn_dropout = 0, head_dropout = 0;

  static int PadVocab(int V) { return (V + 127) / 128 * 128; }
  int kv_heads() const { return NKV > 0 ? NKV : NH; }
  int ffn() const { return F > 0 ? F : 4 * C; }
  int head_size() const { return HD > 0 ? HD : C / NH; }
  // Width of attention's output, NH * head size: C, unless HD says otherwise.
  int attn_width() const { return NH * head_size(); }
  // Width of the fused q|k|v projection: (NH + 2 NKV) * head size (3C without GQA).
  int qkv_width() const { return (NH + 2 * kv_heads()) * head_size(); }
  // Layer l attends through a sliding window (see window).
  bool windowed(int l) const {
    return window > 0 && l >= window_from && (global_every == 0 || (l + 1) % global_every != 0);
  }
  // Width of the MLP's input product: F, or 2F (gate|up) for the family's gated MLP (SwiGLU).
  int mlp_in_width() const;
  // Columns of the head's output per position (kLm: Vp, kSpan: 2) or per sequence (kClassify:
  // labels).
  int head_width() const;
  // An encoder family (BlockKind::encoder: BERT, DistilBERT).
  bool encoder() const;

  // Equal models: NKV 0 and NH (F 0 and 4C, HD 0 and C/NH) are the same model.
  bool operator==(const Shape& o) const;
  std::string ToString() const;
  // What is wrong with this shape ("" if nothing): a dimension below 1 or above its bound in
  // model/limits.h, NH not dividing C (without HD), NKV not dividing NH, Vp < V, a non-finite or
  // non-positive eps or theta, a window pattern out of range, a head the family has not, what the
  // family's own rules refuse (Family::problem), or more than kMaxParams parameters. Computed
  // without overflow for any values, so a damaged header is judged before it sizes memory.
  std::string Problem() const;
  // Parameters of a valid shape (Problem() == ""), as ParamLayout(*this).total() but without
  // building the layout.
  std::uint64_t ParamCount() const;
};

// The shape as JSON (state.bin, the family checkpoint header): every field by name. FromJson
// throws nlohmann's exceptions for a missing or mistyped key (callers name the file); GPT-2
// fields absent from older files take their defaults.
nlohmann::json ShapeToJson(const Shape& s);
Shape ShapeFromJson(const nlohmann::json& j);

}  // namespace cputrain::model
