// model/: a model family is data — one table per family, read by everything else.
//
// A Family says which layers its blocks are made of (BlockKind: the one forward/backward in
// transformer.h runs them), which parameter tensors it has (our role, name, shape, weight decay,
// init), how a config's model.* keys and a Hugging Face config.json become its Shape and back,
// how Hugging Face names and lays out its tensors (names with {} for the layer index, which rows
// of a fused tensor a Hugging Face tensor is, transposes), LoRA's default targets, and its named
// shapes (presets). The trainer, the flat buffers and their ZeRO shards, the optimizer, bf16,
// checkpoints, eval, generate, export and the MPI bridge see a Shape, a ParamLayout and these
// tables only; none compares an Arch with a family.
//
// Adding a family: a file under src/model/families/ defining its `const Family` (gpt2.cc and
// llama.cc are the examples), one line in families.h, and the kernel options it really lacks.
// Nothing else names it: CMake finds the file, Arch gets its value from the registry line, the
// config, the trainer, the CLI and the benchmarks read its table.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "model/params.h"
#include "model/presets.h"
#include "model/shape.h"

namespace cputrain::model {

// What a block is made of. A pre-norm decoder block (causal attention, in a sliding window on the
// layers Shape::windowed names):
//   x += post1?(attn_out(attention(rope?(qk_norm?(qkv(norm1(x)))))))
//   x += post2?(mlp_out(act(mlp_in(norm2(x)))))
// norm: LayerNorm (weight, bias) or RMSNorm (weight; Gemma's scales by 1 + weight); act: GELU
// (tanh), or SwiGLU / GeGLU (tanh GELU) over the gate|up halves of mlp_in; qk_norm: an RMSNorm
// over each query and key head; post1, post2: Gemma's norms after attention and the MLP;
// learned positions when the family has kWpe; Gemma's embeddings times sqrt(C).
// An encoder block (BERT; bidirectional attention over each row's unpadded keys), post-norm:
//   x = norm1(x + drop(attn_out(attention(qkv(x)))));  x = norm2(x + drop(mlp_out(act(mlp_in(x)))))
// after x = drop(normE(wte + wpe + wtt)); no final norm; a task head (Shape::head) on top.
struct BlockKind {
  bool rms_norm = false;
  bool swiglu = false;
  bool rope = false;
  bool encoder = false;
  bool gelu_erf = false;  // exact GELU, 0.5 x (1 + erf(x/sqrt 2)) (BERT's "gelu"); else tanh's
  // Dropout of attention's output projection before the residual add (BERT yes, DistilBERT no).
  bool attn_out_dropout = true;
  bool geglu = false;          // gated MLP with the tanh GELU, gelu(gate) * up (Gemma)
  bool qk_norm = false;        // RMSNorm of each query and key head before RoPE (Qwen3, Gemma 3)
  bool sandwich_norm = false;  // norms after attention and the MLP too (kLnPostAttnw/Mlpw)
  bool norm_plus_one = false;  // RMSNorm scales by (1 + weight) (Gemma)
  bool embed_scale = false;    // embeddings times sqrt(C), rounded to fp32 (Gemma)
  // nn.Embedding(padding_idx = pad_token_id): the padding token's row gets no gradient through
  // the lookup (the Llama lineage; GPT-2's wte has no padding_idx).
  bool embed_padding_idx = true;
};

// A Hugging Face model_type of the family's lineage that it does not run, and what it is (the
// refusal names it instead of calling the type unknown).
struct HfRefusedType {
  const char* model_type;
  const char* what;
};

// One Hugging Face tensor: which of our tensors (and which of its rows) it is.
struct HfTensor {
  // Rows of our tensor that the HF tensor holds: all of them, or one part of a fused tensor —
  // q, k or v of kQkvw/kQkvb ([NH | NKV | NKV] heads), gate or up of kFcw/kFcb ([F | F]).
  enum Rows { kAll, kQ, kK, kV, kGate, kUp };
  Tensor t;
  const char* name;  // "model.layers.{}.self_attn.q_proj.weight": {} is the layer
  Rows rows = kAll;
  bool transpose = false;  // HF stores (in, out) (GPT-2's Conv1D); ours is (out, in)
  // A task head's tensor (qa_outputs.weight), for models whose Shape::head is this (a Head's
  // value; -1: every model's tensor): never under hf_optional_prefix, and initialized
  // (normal(0, 0.02), zero bias) with a note when a checkpoint lacks it, as transformers does
  // when a pretrained body gets a new head.
  int head = -1;
};

// Sequence classification's pooling (model/head.h): the last token that is not padding
// (decoders' XForSequenceClassification), or the first token through a dense layer and tanh
// (BERT's pooler) or ReLU (DistilBERT's pre_classifier).
enum class Pooling { kLastToken, kFirstTanh, kFirstRelu };

// Rows [*begin, *begin + *rows) of our tensor (info, of a model of shape s) that an HF tensor
// of part `part` covers.
void HfRows(HfTensor::Rows part, const Shape& s, const TensorInfo& info, std::size_t* begin,
            std::size_t* rows);

// One parameter tensor as Hugging Face (or PEFT, for an adapter) holds it: `rows` rows of `cols`
// floats from `offset` in the flat buffer, row-major; `matrix`: 2-D there (a 1-D tensor is one
// row). What an optimizer that looks at whole tensors (Adafactor's factored moments, its RMS
// clipping) must see, so that it runs as transformers' does on the same model: q, k and v of our
// fused kQkvw are three tensors for Llama and one for GPT-2 (c_attn); the vocabulary's padding
// rows are no tensor's.
struct HfView {
  std::size_t offset = 0, rows = 1, cols = 0;
  bool matrix = false;
  bool decay = false;  // the table's weight-decay setting
};
// Every tensor copy of `layout`, cut as its family's hf_tensors cut it (a LoRA layout's adapters
// and saved modules: one per copy, model/lora.h), in flat-buffer order; together they cover the
// buffer but for padding rows. A tensor no hf_tensors row names is one view per copy.
std::vector<HfView> HfViews(const ParamLayout& layout);

// llama.cpp's GGUF names of a family (model/gguf.h writes them; docs/gguf.md): its
// general.architecture, one row per tensor as llama.cpp's llama-arch.cpp names it, and the keys
// and extra tensors of the architecture.
class GgufWriter;
struct GgufTensor {
  Tensor t;
  const char* name;  // "blk.{}.attn_q.weight": {} is the layer
  HfTensor::Rows rows = HfTensor::kAll;
  // Rows of each head reordered from Hugging Face's rotate-half pairs (i, i + hs/2) to the
  // adjacent pairs (2i, 2i + 1) llama.cpp rotates for this architecture (convert_hf_to_gguf.py's
  // LlamaModel.permute): q_proj's heads NH, k_proj's NKV.
  bool rope_permute = false;
  // Stored as w + 1: Gemma's RMSNorms scale by (1 + w), llama.cpp's by the weight itself
  // (convert_hf_to_gguf.py's Gemma3Model.norm_shift).
  bool plus_one = false;
};
struct GgufNames {
  const char* arch;  // "llama", "gpt2": general.architecture and the prefix of its keys
  std::vector<GgufTensor> tensors;  // an untied model's LM head included; absent tensors skipped
  // The architecture's keys beyond those every family writes (model/gguf.h: <arch>.
  // context_length, embedding_length, block_count, feed_forward_length, attention.head_count),
  // and tensors llama.cpp computes from the config (Llama 3 scaling's rope_freqs.weight).
  void (*metadata)(const Shape& s, GgufWriter& w);
  // What llama.cpp's architecture cannot run of a model of shape s, "" if nothing (a bias it
  // has no tensor for, a value it fixes); null: nothing.
  std::string (*problem)(const Shape& s) = nullptr;
  // llama.cpp runs the architecture's sliding windows as ours (problem checks their pattern);
  // false: it attends the whole context, and a windowed model is exported with a warning.
  bool windows = false;
};

struct Family {
  const char* name;  // "gpt2": model.arch in configs, the name in checkpoints
  Arch arch;         // its line in families.h
  BlockKind kind;
  // The parameter tensors in flat-buffer order (params.h: inputs, one block, outputs).
  std::vector<TensorInfo> (*tensors)(const Shape&);
  // What this family cannot be beyond Shape::Problem()'s own checks ("" if nothing): GPT-2's
  // fixed widths, BERT's token types. Null: nothing more.
  std::string (*problem)(const Shape&) = nullptr;
  // A random init's shape from the config's model.* keys (train::ShapeFromConfig): `keys` has
  // arch and head set and every key in its field (the dimensions, NKV, F, norm_eps, rope_theta
  // and rope_scaling, tied, types, the dropouts). The family keeps the keys that apply to it,
  // fixes the rest to its own values, and throws InputError naming the model.* key it cannot run
  // (GPT-2 with kv_heads != heads).
  Shape (*from_config)(const Shape& keys);

  // Hugging Face. model_type in config.json; the architecture written on export.
  const char* hf_model_type;
  const char* hf_architecture;
  // The shape config.json describes (ReadHfShape sets its arch); InputError naming the key of a
  // config this engine cannot run (path is config.json's, for messages).
  Shape (*from_hf_config)(const nlohmann::json& cfg, const std::string& path);
  // config.json for a shape (keys sorted when dumped, as transformers writes them).
  nlohmann::json (*to_hf_config)(const Shape&);
  // Every tensor of the checkpoint (the LM head of a tied model is not listed: lm_head.weight).
  std::vector<HfTensor> hf_tensors;
  // A prefix that saves may or may not have (GPT2Model vs GPT2LMHeadModel): "transformer.";
  // the body's tensors of a task model (BertForQuestionAnswering: "bert.").
  const char* hf_optional_prefix;
  // Name endings of buffers that saves may hold and that are not parameters (ignored).
  std::vector<const char*> hf_ignored_suffixes;
  // Relatives refused by name (Gemma 3's image-text model_type gemma3).
  std::vector<HfRefusedType> hf_refused_types = {};
  // Encoder families: tensors of other heads a checkpoint may hold (a pretraining checkpoint's
  // masked-LM and next-sentence heads, another task's head), dropped with a note as
  // transformers does when fine-tuning from them: name prefixes.
  std::vector<const char*> hf_dropped_prefixes = {};
  // The task head's model class per head (BertForQuestionAnswering, ...), "" if none.
  const char* hf_span_architecture = "";
  // Sequence classification (model/head.h): the class ("" if the family has no classifier here)
  // and how it pools a row. A decoder family needs only its class name: its score tensor is the
  // head module's.
  const char* hf_classify_architecture = "";
  Pooling classify_pooling = Pooling::kLastToken;
  // What to do about a tied model whose lm_head.weight differs from its embedding (the load
  // refuses it): the hint.
  const char* hf_untied_hint =
      "set \"tie_word_embeddings\": false in config.json if the head is its own tensor";
  // LoRA (model/lora.h): the modules adapted when target_modules is not given: PEFT's own
  // default for the model type where it has one (DistilBERT: none; ours is its query and value).
  std::vector<const char*> lora_default_targets = {};

  // llm.c's model.bin: the family's whole shape is llm.c's checkpoint header (maxT, V, L, NH, C,
  // Vp: GPT-2), so its checkpoints are llm.c's files, `export --format llmc` writes it, and its
  // shape prints as those six numbers. Other families' checkpoints carry their shape as JSON.
  bool llmc = false;
  // The tokenizer a checkpoint of this family implies by its vocabulary alone, when no
  // tokenizer ships beside it (generate --tokenizer auto): GPT-2's BPE ("gpt2") for V >= 50257.
  // Null: none; the model's own tokenizer.json must be given (bytes still serve V <= 256).
  const char* vocab_tokenizer = nullptr;
  // Named shapes of this family (presets.h: the benchmarks' models, configs' starting points).
  std::vector<Preset> presets = {};
  // bench train (bench/): the target for ours / PyTorch's best tokens/s in fp32 (the issues'
  // 1.5; GPT-2's history is 1), and whether PyTorch's side trains bench/pytorch/train_gpt2.py's
  // own model (GPT-2's nanoGPT, so its rows stay comparable with docs/benchmarks.md's history)
  // instead of transformers' class built from the config.json our export writes.
  struct Bench {
    double speed_target = 1.5;
    bool script_model = false;
  } bench = {};
  // llama.cpp's GGUF names (export --format gguf); null: not exported to GGUF.
  const GgufNames* gguf = nullptr;
};

const Family& FamilyOf(Arch arch);
// Every family, in Arch order (families.h); "gpt2, llama, ..." for messages.
const std::vector<const Family*>& Families();
std::string FamilyNames();
// The family named `name` (model.arch), or the one whose hf_model_type is `model_type`, or null.
const Family* FindFamily(const std::string& name);
const Family* FamilyOfHfType(const std::string& model_type);

// The shape of a random init from the config's model.* keys (see Family::from_config): the
// family's from_config, after the check every family shares (the head it has); InputError naming
// the keys. (ParamLayout judges the resulting shape as a whole, Shape::Problem.)
Shape ShapeFromConfigKeys(const Shape& keys);

}  // namespace cputrain::model
