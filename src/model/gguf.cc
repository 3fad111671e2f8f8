#include "model/gguf.h"

#include <fmt/format.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "common/error.h"
#include "common/log.h"
#include "data/vocab_list.h"
#include "kernels/bf16.h"
#include "model/family.h"
#include "model/gguf_file.h"

namespace cputrain::model {
namespace {

// One GGUF tensor: rows [row_begin, +rows) of our tensor t's copy for `layer`, cols wide.
struct Planned {
  std::string name;
  Tensor t;
  int layer;
  std::size_t row_begin, rows, cols;
  bool one_dim;
  int permute_heads;  // > 0: rope_permute over this many heads
  bool plus_one;      // GgufTensor::plus_one
  GgmlType type;
};

// convert_hf_to_gguf.py's choice of type for a tensor (its prepare_tensors).
GgmlType TypeFor(const std::string& name, bool one_dim, std::size_t cols, GgufOutType out) {
  const bool ends_weight = name.size() >= 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
  const bool norm = name.find("_norm.weight") != std::string::npos;
  if (one_dim || norm || !ends_weight || name == "position_embd.weight") return GgmlType::kF32;
  switch (out) {
    case GgufOutType::kF32:
      return GgmlType::kF32;
    case GgufOutType::kF16:
      return GgmlType::kF16;
    case GgufOutType::kBf16:
      return GgmlType::kBf16;
    case GgufOutType::kQ8_0:
      return cols % kQ8Block == 0 ? GgmlType::kQ8_0 : GgmlType::kF16;
  }
  return GgmlType::kF32;
}

// The file's tensors in the flat buffer's order (params.h): the inputs, block 0's, block 1's,
// ..., the outputs, so that a block's tensors are together in the file as in memory.
std::vector<Planned> Plan(const ParamLayout& layout, const GgufNames& g, GgufOutType out) {
  const Shape& s = layout.shape();
  std::vector<Planned> plan;
  auto add = [&](const GgufTensor& row, int l) {
    const TensorInfo& info = layout.info(row.t);
    std::size_t begin = 0, rows = 0;
    HfRows(row.rows, s, info, &begin, &rows);
    const bool one_dim = info.shape.size() == 1;
    const std::size_t cols = one_dim ? 1 : info.shape[1];
    const int heads = !row.rope_permute ? 0 : row.rows == HfTensor::kK ? s.kv_heads() : s.NH;
    std::string name = info.per_layer ? fmt::format(fmt::runtime(row.name), l) : row.name;
    const GgmlType type = TypeFor(name, one_dim, cols, out);
    plan.push_back(
        {std::move(name), row.t, l, begin, rows, cols, one_dim, heads, row.plus_one, type});
  };
  auto where = [&](const GgufTensor& row) {  // 0 input, 1 per layer, 2 output
    const TensorInfo& info = layout.info(row.t);
    return info.per_layer ? 1 : layout.offset(row.t) < layout.block_begin(0) ? 0 : 2;
  };
  for (int phase = 0; phase < 3; ++phase) {
    for (int l = 0; l < (phase == 1 ? s.L : 1); ++l) {
      for (const GgufTensor& row : g.tensors) {
        // An optional tensor this model has not (a bias, an untied head) is skipped.
        if (layout.has(row.t) && where(row) == phase) add(row, l);
      }
    }
  }
  return plan;
}

// The rows of p in GGUF's order: llama.cpp's rope permutation moves row (h, j, i) of each head
// (j: which half, i < hs/2) to (h, i, j). Values plus one where p.plus_one (fp32, as convert's
// torch add).
std::vector<float> Rows(const Planned& p, const ParamLayout& layout, const float* params) {
  const float* src = params + layout.offset(p.t, p.layer) + p.row_begin * p.cols;
  std::vector<float> out(src, src + p.rows * p.cols);
  if (p.plus_one)
    for (float& x : out) x += 1.0f;
  if (p.permute_heads <= 0) return out;
  const std::size_t hs = p.rows / p.permute_heads, half = hs / 2;
  for (std::size_t h = 0; h < static_cast<std::size_t>(p.permute_heads); ++h)
    for (std::size_t j = 0; j < 2; ++j)
      for (std::size_t i = 0; i < half; ++i)
        std::copy_n(src + (h * hs + j * half + i) * p.cols, p.cols,
                    out.begin() + (h * hs + 2 * i + j) * p.cols);
  return out;
}

void AppendU16(std::vector<std::uint8_t>* out, std::uint16_t v) {
  out->push_back(static_cast<std::uint8_t>(v & 0xff));
  out->push_back(static_cast<std::uint8_t>(v >> 8));
}

// F16, round to nearest even (F16C's conversion, as numpy's astype(float16)).
std::uint16_t ToHalf(float x) { return _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT); }

// ggml's quantize_row_q8_0_ref, step for step as gguf-py's numpy port (fp32 throughout).
void EncodeQ8(const float* x, std::size_t n, std::vector<std::uint8_t>* out) {
  for (std::size_t b = 0; b < n; b += kQ8Block) {
    float amax = 0;
    for (std::size_t i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    const float d = amax / 127.0f;
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    AppendU16(out, ToHalf(d));
    for (std::size_t i = 0; i < kQ8Block; ++i) {
      out->push_back(
          static_cast<std::uint8_t>(static_cast<std::int8_t>(std::round(x[b + i] * id))));
    }
  }
}

void Encode(const std::vector<float>& x, GgmlType type, std::vector<std::uint8_t>* out) {
  out->reserve(GgmlBytes(type, x.size()));
  switch (type) {
    case GgmlType::kF32: {
      const auto* p = reinterpret_cast<const std::uint8_t*>(x.data());
      out->insert(out->end(), p, p + x.size() * sizeof(float));
      return;
    }
    case GgmlType::kF16:
      for (float v : x) AppendU16(out, ToHalf(v));
      return;
    case GgmlType::kBf16:
      for (float v : x) AppendU16(out, kernels::FloatToBf16(v));
      return;
    case GgmlType::kQ8_0:
      EncodeQ8(x.data(), x.size(), out);
      return;
  }
}

// llama.cpp's pre-tokenizer name (tokenizer.ggml.pre) for a byte-level BPE's splitting, and the
// ignore_merges llama.cpp's loader sets for it (llama-vocab.cpp); nullptr if it has none.
const char* PreName(data::VocabList::Split split, bool* ignore_merges) {
  using S = data::VocabList::Split;
  *ignore_merges = split == S::kLlama3;
  switch (split) {
    case S::kGpt2:
      return "gpt-2";
    case S::kLlama3:
      return "llama-bpe";
    case S::kQwen2:
      return "qwen2";
    case S::kDigitsGpt2:
      return "smollm";
    default:
      return nullptr;
  }
}

[[noreturn]] void Unsupported(const data::VocabList& v, const std::string& what) {
  throw InputError(fmt::format("'{}': {}: llama.cpp's tokenizer cannot reproduce it, so the GGUF "
                               "file would tokenize text differently",
                               v.source, what),
                   "docs/gguf.md lists the tokenizers that export to GGUF");
}

// A merge as tokenizer.ggml.merges spells it: "left right", a space inside a part written U+0120
// (convert_hf_to_gguf.py's encoding of [a, b] merges).
std::string MergeText(const data::VocabList& v, const data::VocabList::Merge& m) {
  auto part = [&](int id) {
    std::string s;
    for (char c : v.tokens[id]) s += c == ' ' ? std::string("\xc4\xa0") : std::string(1, c);
    return s;
  };
  return part(m.left) + " " + part(m.right);
}

// tokenizer.ggml.*: the model, pre-tokenizer, tokens, types, scores or merges, special ids.
void WriteTokenizer(const data::VocabList& v, GgufWriter& w) {
  using K = data::VocabList::Kind;
  const bool spm = v.model == data::VocabList::Model::kSentencePieceBpe;
  std::vector<std::int32_t> types;  // llama.cpp's llama_token_type: 1 normal ... 6 byte
  for (K k : v.kinds) {
    types.push_back(k == K::kNormal        ? 1
                    : k == K::kControl     ? 3
                    : k == K::kUserDefined ? 4
                    : k == K::kUnused      ? 5
                                           : 6);
  }
  w.String("tokenizer.ggml.model", spm ? "llama" : "gpt2");
  if (spm) {
    w.String("tokenizer.ggml.pre", "default");
  } else {
    bool ignore = false;
    const char* pre = PreName(v.split, &ignore);
    if (pre == nullptr) Unsupported(v, "the pre-tokenizer " + v.split_text);
    if (ignore != v.ignore_merges && !v.unmerged.empty()) {
      Unsupported(
          v, fmt::format("model.ignore_merges is {}, llama.cpp's '{}' pre-tokenizer runs "
                         "with {}, and {} vocabulary token(s) ('{}', ...) are not what "
                         "the merges make of their own text, so the two settings differ",
                         v.ignore_merges, pre, ignore, v.unmerged.size(), v.tokens[v.unmerged[0]]));
    }
    if (v.prefix_space) Unsupported(v, "ByteLevel's add_prefix_space");
    w.String("tokenizer.ggml.pre", pre);
  }
  w.Strings("tokenizer.ggml.tokens", v.tokens);
  w.Int32s("tokenizer.ggml.token_type", types);
  if (spm) {
    // llama.cpp's SentencePiece tokenizer merges the adjacent pair whose result scores highest:
    // a token made by the merge of rank r scores -r, so it merges in BPE's rank order.
    std::vector<float> scores(v.tokens.size(), 0.0f);
    std::vector<bool> made(v.tokens.size(), false);
    for (std::size_t r = 0; r < v.merges.size(); ++r) {
      const int m = v.merges[r].merged;
      if (!made[m]) scores[m] = -static_cast<float>(r), made[m] = true;
    }
    w.Float32s("tokenizer.ggml.scores", scores);
  } else {
    std::vector<std::string> merges;
    merges.reserve(v.merges.size());
    for (const data::VocabList::Merge& m : v.merges) merges.push_back(MergeText(v, m));
    w.Strings("tokenizer.ggml.merges", merges);
  }
  for (auto [key, id] : {std::pair{"bos", v.bos}, std::pair{"eos", v.eos},
                         std::pair{"unknown", v.unk}, std::pair{"padding", v.pad}}) {
    if (id >= 0) w.Uint32(fmt::format("tokenizer.ggml.{}_token_id", key), id);
  }
  w.Bool("tokenizer.ggml.add_bos_token", v.add_bos);
  w.Bool("tokenizer.ggml.add_eos_token", v.add_eos);
  w.Bool("tokenizer.ggml.add_sep_token", false);  // a separator frames text pairs (encoders)
  if (spm) w.Bool("tokenizer.ggml.add_space_prefix", v.prefix_space);
  if (!v.chat_template.empty()) w.String("tokenizer.chat_template", v.chat_template);
}

// llama.cpp's file types (llama.h: LLAMA_FTYPE_*), general.file_type.
std::uint32_t FileType(GgufOutType t) {
  switch (t) {
    case GgufOutType::kF32:
      return 0;
    case GgufOutType::kF16:
      return 1;
    case GgufOutType::kQ8_0:
      return 7;
    case GgufOutType::kBf16:
      return 32;
  }
  return 0;
}

}  // namespace

const char* GgufOutTypeName(GgufOutType t) {
  switch (t) {
    case GgufOutType::kF32:
      return "f32";
    case GgufOutType::kF16:
      return "f16";
    case GgufOutType::kBf16:
      return "bf16";
    case GgufOutType::kQ8_0:
      return "q8_0";
  }
  return "?";
}

GgufOutType GgufOutTypeFromName(const std::string& name) {
  for (GgufOutType t :
       {GgufOutType::kF32, GgufOutType::kF16, GgufOutType::kBf16, GgufOutType::kQ8_0})
    if (name == GgufOutTypeName(t)) return t;
  throw InputError(fmt::format("'{}' is not a GGUF tensor type", name),
                   "use f32, f16, bf16 or q8_0");
}

void CheckGgufModel(const Shape& s) {
  const Family& family = FamilyOf(s.arch);
  if (family.gguf == nullptr || s.head != Head::kLm) {
    throw InputError(fmt::format("a {} model{} has no GGUF export: llama.cpp runs decoder "
                                 "language models",
                                 family.name, s.head != Head::kLm ? " with a task head" : ""),
                     "export it with --format hf");
  }
  if (const GgufNames& g = *family.gguf; g.problem != nullptr) {
    if (const std::string why = g.problem(s); !why.empty()) {
      throw InputError(fmt::format("llama.cpp's {} architecture cannot run this {} model: {}",
                                   g.arch, family.name, why),
                       "export it with --format hf (docs/gguf.md lists what each family's GGUF "
                       "export takes)");
    }
  }
}

void CheckGguf(const Shape& s, const data::VocabList& vocab) {
  CheckGgufModel(s);
  if (vocab.tokens.size() != static_cast<std::size_t>(s.V)) {
    throw InputError(fmt::format("'{}' lists {} tokens, the model has a vocabulary of {}",
                                 vocab.source, vocab.tokens.size(), s.V),
                     "pass the tokenizer the model was trained with");
  }
  GgufWriter scratch;
  WriteTokenizer(vocab, scratch);  // throws for a tokenizer llama.cpp cannot reproduce
}

GgufSummary ExportGguf(const std::string& path, const ParamLayout& layout, const float* params,
                       const data::VocabList& vocab, GgufOutType type, const std::string& name) {
  const Shape& s = layout.shape();
  CheckGguf(s, vocab);
  if (vocab.nfc) {
    log::Warn(
        "'{}' normalizes text to Unicode NFC, which llama.cpp's tokenizer does not: text "
        "that is not in NFC tokenizes differently there (docs/gguf.md)",
        vocab.source);
  }
  const GgufNames& g = *FamilyOf(s.arch).gguf;
  if (s.window > 0 && !g.windows) {
    log::Warn(
        "the model attends through a sliding window of {} positions; llama.cpp's {} attends the "
        "whole context, so past {} positions its outputs differ from the engine's (docs/gguf.md)",
        s.window, g.arch, s.window);
  }
  GgufWriter w;
  const std::string a = g.arch;
  w.String("general.architecture", a);
  w.String("general.type", "model");
  w.String("general.name", name);
  w.Uint32("general.file_type", FileType(type));
  w.Uint32("general.quantization_version", 2);  // ggml's GGML_QNT_VERSION
  w.Uint32(a + ".context_length", s.maxT);
  w.Uint32(a + ".embedding_length", s.C);
  w.Uint32(a + ".block_count", s.L);
  w.Uint32(a + ".feed_forward_length", s.ffn());
  w.Uint32(a + ".attention.head_count", s.NH);
  g.metadata(s, w);  // the family's keys, and its computed tensors (first, as convert writes)
  // A padding token the model names when the tokenizer names none (Gemma's pad_token_id 0), as
  // convert_hf_to_gguf.py takes config.json's.
  data::VocabList v = vocab;
  if (v.pad < 0 && s.pad_token >= 0 && s.pad_token < s.V) v.pad = s.pad_token;
  WriteTokenizer(v, w);

  GgufSummary sum;
  sum.tensors = w.tensor_count();  // the family's computed ones (F32)
  sum.f32 = type != GgufOutType::kF32 ? sum.tensors : 0;
  for (const Planned& p : Plan(layout, g, type)) {
    std::vector<std::uint64_t> shape = {p.rows};
    if (!p.one_dim) shape.push_back(p.cols);
    w.Tensor(p.name, shape, p.type, [p, &layout, params](std::vector<std::uint8_t>* out) {
      Encode(Rows(p, layout, params), p.type, out);
    });
    ++sum.tensors;
    sum.f32 += p.type == GgmlType::kF32 && type != GgufOutType::kF32;
    sum.f16_fallback += p.type == GgmlType::kF16 && type == GgufOutType::kQ8_0;
  }
  sum.quantized = sum.tensors - sum.f32 - sum.f16_fallback;
  w.Write(path);
  std::error_code ec;
  sum.bytes = std::filesystem::file_size(path, ec);
  return sum;
}

}  // namespace cputrain::model
