#include "model/hf_gpt2.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "common/files.h"
#include "model/limits.h"
#include "model/safetensors.h"

namespace cputrain::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Our tensor, its name in GPT2Model's state_dict (after "h.<l>." for per-layer tensors), and
// whether it is a Conv1D weight, stored (in, out) by HF and (out, in) here.
struct HfName {
  Tensor t;
  const char* name;
  bool conv1d;
};
constexpr HfName kHfNames[kNumTensors] = {{kWte, "wte.weight", false},
                                          {kWpe, "wpe.weight", false},
                                          {kLn1w, "ln_1.weight", false},
                                          {kLn1b, "ln_1.bias", false},
                                          {kQkvw, "attn.c_attn.weight", true},
                                          {kQkvb, "attn.c_attn.bias", false},
                                          {kAttprojw, "attn.c_proj.weight", true},
                                          {kAttprojb, "attn.c_proj.bias", false},
                                          {kLn2w, "ln_2.weight", false},
                                          {kLn2b, "ln_2.bias", false},
                                          {kFcw, "mlp.c_fc.weight", true},
                                          {kFcb, "mlp.c_fc.bias", false},
                                          {kFcprojw, "mlp.c_proj.weight", true},
                                          {kFcprojb, "mlp.c_proj.bias", false},
                                          {kLnfw, "ln_f.weight", false},
                                          {kLnfb, "ln_f.bias", false}};

std::string HfTensorName(const std::string& prefix, const HfName& n, bool per_layer, int l) {
  return per_layer ? fmt::format("{}h.{}.{}", prefix, l, n.name) : prefix + n.name;
}

// The shape HF stores: Conv1D weights transposed, wte with the real V rows only.
std::vector<std::uint64_t> HfShape(const HfName& n, const TensorInfo& info, const Shape& s) {
  std::vector<std::uint64_t> shape(info.shape.begin(), info.shape.end());
  if (n.t == kWte) shape[0] = static_cast<std::uint64_t>(s.V);
  if (n.conv1d) std::swap(shape[0], shape[1]);
  return shape;
}

// (rows, cols) row-major -> (cols, rows) row-major.
void Transpose(const float* in, std::size_t rows, std::size_t cols, float* out) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
}

[[noreturn]] void BadConfig(const std::string& path, const std::string& what,
                            const std::string& hint) {
  throw InputError(fmt::format("Hugging Face config '{}': {}", path, what), hint);
}

int IntKey(const json& cfg, const std::string& key, const std::string& path, int max) {
  if (!cfg.contains(key)) {
    BadConfig(path, fmt::format("key '{}' is missing", key), "a GPT-2 config.json has it");
  }
  const json& v = cfg[key];
  if (!v.is_number_integer() || v.get<long long>() < 1 || v.get<long long>() > max) {
    BadConfig(path, fmt::format("{} is {}, not an integer in [1, {}]", key, v.dump(), max),
              "fix config.json");
  }
  return static_cast<int>(v.get<long long>());
}

// A key this engine implements one way only: absent, or one of `ok`.
void FixedKey(const json& cfg, const std::string& key, const std::vector<json>& ok,
              const std::string& path) {
  if (!cfg.contains(key)) return;
  for (const json& v : ok)
    if (cfg[key] == v) return;
  BadConfig(
      path,
      fmt::format("{} is {}; cputrain-numa runs only {}", key, cfg[key].dump(), json(ok).dump()),
      "this model is not a GPT-2 this engine can run");
}

void CheckRunnable(const json& cfg, const std::string& path) {
  FixedKey(cfg, "model_type", {"gpt2"}, path);
  FixedKey(cfg, "activation_function", {"gelu_new", "gelu_pytorch_tanh"}, path);
  FixedKey(cfg, "scale_attn_weights", {true}, path);
  FixedKey(cfg, "scale_attn_by_inverse_layer_idx", {false}, path);
  FixedKey(cfg, "add_cross_attention", {false}, path);
  FixedKey(cfg, "tie_word_embeddings", {true}, path);
  if (cfg.contains("layer_norm_epsilon")) {
    const json& e = cfg["layer_norm_epsilon"];
    if (!e.is_number() || std::fabs(e.get<double>() - 1e-5) > 1e-12) {
      BadConfig(
          path,
          fmt::format("layer_norm_epsilon is {}; cputrain-numa's LayerNorm uses 1e-5", e.dump()),
          "this model is not a GPT-2 this engine can run");
    }
  }
}

Shape ShapeFromConfig(const json& cfg, const std::string& path) {
  if (!cfg.is_object()) BadConfig(path, "not a JSON object", "fix config.json");
  CheckRunnable(cfg, path);
  Shape s;
  s.C = IntKey(cfg, "n_embd", path, kMaxChannels);
  s.L = IntKey(cfg, "n_layer", path, kMaxLayers);
  s.NH = IntKey(cfg, "n_head", path, kMaxChannels);
  s.V = IntKey(cfg, "vocab_size", path, kMaxVocab);
  s.maxT = IntKey(cfg, cfg.contains("n_positions") ? "n_positions" : "n_ctx", path, kMaxSeqLen);
  s.Vp = Shape::PadVocab(s.V);
  if (cfg.contains("n_inner") && !cfg["n_inner"].is_null() &&
      cfg["n_inner"] != json(std::int64_t{4} * s.C)) {
    BadConfig(path,
              fmt::format("n_inner is {}; cputrain-numa's MLP is 4 * n_embd = {}",
                          cfg["n_inner"].dump(), 4 * s.C),
              "this model is not a GPT-2 this engine can run");
  }
  const std::string problem = s.Problem();
  if (!problem.empty()) {
    BadConfig(path, fmt::format("it describes an impossible model ({}): {}", s.ToString(), problem),
              "fix config.json");
  }
  return s;
}

// Checks that every tensor of `st` is one we read or may ignore; returns the name prefix.
std::string CheckNames(const SafetensorsFile& st, const std::set<std::string>& wanted_no_prefix) {
  const std::string prefix = st.Find("transformer.wte.weight") ? "transformer." : "";
  for (const SafeTensor& t : st.tensors()) {
    const std::string& n = t.name;
    if (n == "lm_head.weight") continue;
    if (n.compare(0, prefix.size(), prefix) == 0 && wanted_no_prefix.count(n.substr(prefix.size())))
      continue;
    auto ends = [&](std::string_view s) {
      return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
    };
    if (ends(".attn.bias") || ends(".attn.masked_bias")) continue;  // causal-mask buffers
    throw InputError(fmt::format("safetensors file '{}' holds tensor '{}', which is not part of "
                                 "a GPT-2 LM head model",
                                 st.path(), n),
                     "pass a GPT2LMHeadModel or GPT2Model save");
  }
  return prefix;
}

void LoadTensor(SafetensorsFile& st, const std::string& name, const std::vector<std::uint64_t>& shp,
                std::vector<float>& buf) {
  const SafeTensor* t = st.Find(name);
  if (!t) {
    throw InputError(fmt::format("safetensors file '{}' has no tensor '{}'", st.path(), name),
                     "the file is not a GPT-2 of config.json's shape, or is incomplete");
  }
  if (t->shape != shp) {
    throw InputError(fmt::format("safetensors file '{}': tensor '{}' has shape [{}], config.json "
                                 "implies [{}]",
                                 st.path(), name, fmt::join(t->shape, ", "), fmt::join(shp, ", ")),
                     "config.json and model.safetensors do not belong together");
  }
  buf.resize(t->numel);
  st.ReadF32(*t, buf.data());
}

// lm_head.weight, if present, must be wte: GPT-2 ties them, and so does this engine.
void CheckLmHead(SafetensorsFile& st, const Shape& s, const float* wte) {
  if (!st.Find("lm_head.weight")) return;
  std::vector<float> head;
  LoadTensor(st, "lm_head.weight",
             {static_cast<std::uint64_t>(s.V), static_cast<std::uint64_t>(s.C)}, head);
  if (std::memcmp(head.data(), wte, head.size() * sizeof(float)) != 0) {
    throw InputError(
        fmt::format("safetensors file '{}': lm_head.weight differs from wte.weight", st.path()),
        "cputrain-numa ties the LM head to the token embedding as GPT-2 does; "
        "an untied head cannot be loaded");
  }
}

}  // namespace

bool IsHfDir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / kHfConfigFile, ec);
}

Shape ReadHfShape(const std::string& dir) {
  const std::string path = (fs::path(dir) / kHfConfigFile).string();
  const std::string text =
      ReadFile(path, InputKind{"Hugging Face config", "a config.json file", kMaxConfigBytes,
                               "pass a Hugging Face model directory"});
  const json cfg = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (cfg.is_discarded()) BadConfig(path, "not valid JSON", "fix config.json");
  std::error_code ec;
  if (!fs::exists(fs::path(dir) / kHfWeightsFile, ec)) {
    throw InputError(fmt::format("'{}' has config.json but no {}", dir, kHfWeightsFile),
                     "only safetensors weights are read: download model.safetensors (e.g. "
                     "`huggingface-cli download gpt2 model.safetensors config.json`)");
  }
  return ShapeFromConfig(cfg, path);
}

void LoadHf(const std::string& dir, const ParamLayout& layout, float* params) {
  const Shape s = ReadHfShape(dir);
  if (!(s == layout.shape())) {
    throw InputError(
        fmt::format("'{}' has shape {}, expected {}", dir, s.ToString(), layout.shape().ToString()),
        "use a checkpoint of this model");
  }
  SafetensorsFile st = SafetensorsFile::Open((fs::path(dir) / kHfWeightsFile).string());
  std::set<std::string> wanted;
  for (const HfName& n : kHfNames)
    for (int l = 0; l < (layout.info(n.t).per_layer ? s.L : 1); ++l)
      wanted.insert(HfTensorName("", n, layout.info(n.t).per_layer, l));
  const std::string prefix = CheckNames(st, wanted);
  std::fill(params, params + layout.total(), 0.0f);  // wte's padding rows
  std::vector<float> buf;
  for (const HfName& n : kHfNames) {
    const TensorInfo& info = layout.info(n.t);
    for (int l = 0; l < (info.per_layer ? s.L : 1); ++l) {
      LoadTensor(st, HfTensorName(prefix, n, info.per_layer, l), HfShape(n, info, s), buf);
      float* dst = params + layout.offset(n.t, l);
      if (n.conv1d) {
        Transpose(buf.data(), info.shape[1], info.shape[0], dst);
      } else {
        std::memcpy(dst, buf.data(), buf.size() * sizeof(float));
      }
    }
  }
  CheckLmHead(st, s, params + layout.offset(kWte));
}

std::string HfConfigJson(const Shape& s) {
  json cfg = {{"activation_function", "gelu_new"},
              {"architectures", {"GPT2LMHeadModel"}},
              {"attn_pdrop", 0.1},
              {"embd_pdrop", 0.1},
              {"initializer_range", 0.02},
              {"layer_norm_epsilon", 1e-05},
              {"model_type", "gpt2"},
              {"n_ctx", s.maxT},
              {"n_embd", s.C},
              {"n_head", s.NH},
              {"n_inner", nullptr},
              {"n_layer", s.L},
              {"n_positions", s.maxT},
              {"resid_pdrop", 0.1},
              {"scale_attn_weights", true},
              {"tie_word_embeddings", true},
              {"torch_dtype", "float32"},
              {"use_cache", true},
              {"vocab_size", s.V}};
  if (s.V > 50256) {  // GPT-2's <|endoftext|>; a smaller vocabulary (bytes) has none
    cfg["bos_token_id"] = 50256;
    cfg["eos_token_id"] = 50256;
  }
  return cfg.dump(2) + "\n";
}

void ExportHf(const std::string& dir, const ParamLayout& layout, const float* params) {
  const Shape& s = layout.shape();
  MakeDirs(dir);
  std::vector<std::vector<float>> transposed;  // Conv1D weights, (in, out)
  std::vector<SafeTensorOut> out;
  for (const HfName& n : kHfNames) {
    const TensorInfo& info = layout.info(n.t);
    for (int l = 0; l < (info.per_layer ? s.L : 1); ++l) {
      const float* src = params + layout.offset(n.t, l);
      if (n.conv1d) {
        transposed.emplace_back(info.numel);
        Transpose(src, info.shape[0], info.shape[1], transposed.back().data());
        src = transposed.back().data();
      }
      out.push_back({HfTensorName("transformer.", n, info.per_layer, l), HfShape(n, info, s), src});
    }
  }
  // Weights first, config.json last: a directory whose export was interrupted has no new
  // config.json beside half-written weights (each file is itself atomic).
  WriteSafetensors((fs::path(dir) / kHfWeightsFile).string(), std::move(out), {{"format", "pt"}});
  WriteFileAtomic((fs::path(dir) / kHfConfigFile).string(), HfConfigJson(s));
}

}  // namespace cputrain::model
