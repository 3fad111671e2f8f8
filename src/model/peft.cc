#include "model/peft.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "common/utf8.h"
#include "model/checkpoint.h"
#include "model/family.h"
#include "model/head.h"
#include "model/safetensors.h"

namespace cputrain::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kAdapterBinFile = "adapter_model.bin";
constexpr const char* kMergeWithPeft =
    "merge the adapter with PEFT (PeftModel.merge_and_unload(), then save_pretrained) and pass "
    "the merged model instead";

// PEFT's task_type for a model of this head.
const char* TaskTypeOf(Head head) {
  switch (head) {
    case Head::kLm:
      return "CAUSAL_LM";
    case Head::kSpan:
      return "QUESTION_ANS";
    case Head::kClassify:
      return "SEQ_CLS";
  }
  return "";
}

std::string ConfigPath(const std::string& dir) {
  return (fs::path(dir) / kAdapterConfigFile).string();
}

[[noreturn]] void BadConfig(const std::string& path, const std::string& what,
                            const std::string& fix) {
  throw InputError(fmt::format("PEFT adapter config '{}': {}", path, what), fix);
}

std::string Short(const json& v) {
  const std::string d = v.dump();
  return d.size() > 60 ? d.substr(0, 57) + "..." : d;
}

// A key at PEFT's default for a feature that is off: null, false, "", {} or [].
bool IsOff(const json& v) {
  if (v.is_string()) return v.get_ref<const std::string&>().empty();
  if (v.is_boolean()) return !v.get<bool>();
  return v.is_null() || ((v.is_object() || v.is_array()) && v.empty());
}

// Keys read for what they say below, and keys whose value changes nothing here.
constexpr const char* kReadKeys[] = {"peft_type",         "r",
                                     "lora_alpha",        "lora_dropout",
                                     "target_modules",    "modules_to_save",
                                     "init_lora_weights", "bias",
                                     "use_rslora",        "fan_in_fan_out",
                                     "task_type",         "base_model_name_or_path"};
constexpr const char* kHarmlessKeys[] = {"auto_mapping",       "revision",      "inference_mode",
                                         "peft_version",       "megatron_core", "qalora_group_size",
                                         "ensure_weight_tying"};

// PEFT features this engine does not apply: refused unless off (IsOff).
struct Unsupported {
  const char* key;
  const char* what;
};
constexpr Unsupported kUnsupported[] = {
    {"use_dora", "DoRA (weight-decomposed LoRA: a magnitude vector per module)"},
    {"rank_pattern", "a rank per module"},
    {"alpha_pattern", "an alpha per module"},
    {"layers_to_transform", "adapters in some layers only"},
    {"layers_pattern", "adapters in some layers only"},
    {"exclude_modules", "modules excluded from target_modules"},
    {"lora_bias", "a trained bias in lora_B"},
    {"target_parameters", "adapters on parameters rather than modules"},
    {"layer_replication", "replicated layers"},
    {"use_qalora", "QALoRA"},
    {"use_bdlora", "block-diagonal LoRA"},
    {"alora_invocation_tokens", "activated LoRA"},
    {"trainable_token_indices", "trainable tokens"},
    {"megatron_config", "Megatron's parallel layers"},
    {"loftq_config", "LoftQ"},
    {"eva_config", "EVA"},
    {"corda_config", "CorDA"},
    {"lora_ga_config", "LoRA-GA"},
    {"arrow_config", "Arrow routing"},
    {"kasa_config", "KaSA"},
    {"monteclora_config", "MonteCLoRA"},
    {"velora_config", "VeLoRA"},
};

template <std::size_t N>
bool In(const char* const (&keys)[N], const std::string& key) {
  return std::any_of(std::begin(keys), std::end(keys), [&](const char* k) { return key == k; });
}

// A list of module names (target_modules, modules_to_save).
std::vector<std::string> Names(const json& v, const std::string& key, const std::string& path) {
  std::vector<std::string> out;
  if (!v.is_array())
    BadConfig(path, fmt::format("{} is {}, not a list of module names", key, Short(v)),
              "write it as a list of module names, e.g. [\"q_proj\", \"v_proj\"]");
  for (const json& n : v) {
    if (!n.is_string() || n.get_ref<const std::string&>().empty()) {
      BadConfig(path, fmt::format("{} holds {}, not a module name", key, Short(n)),
                "write it as a list of module names, e.g. [\"q_proj\", \"v_proj\"]");
    }
    out.push_back(n.get<std::string>());
  }
  return out;
}

// target_modules: a list of names (each picks the modules whose path is it or ends with "." +
// it), null (the model type's default), or a string: PEFT's regular expression, matched against
// the whole module path — read only as "all-linear" or a plain name.
std::vector<std::string> TargetModules(const json& v, const std::string& path) {
  if (v.is_null()) return {};
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    std::string lower = s;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (lower == "all-linear") return {"all-linear"};
    const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
      return std::isalnum(c) || c == '_' || c == '.';
    });
    if (!plain) {
      BadConfig(path,
                fmt::format("target_modules is the regular expression {}; cputrain-numa reads a "
                            "list of module names",
                            Short(v)),
                "write target_modules as the list of the module names it matches (e.g. "
                "[\"q_proj\", \"v_proj\"]): PEFT loads the list the same way");
    }
    return {s};
  }
  std::vector<std::string> out = Names(v, "target_modules", path);
  if (out.empty()) {
    BadConfig(path, "target_modules is an empty list",
              "list the adapted modules (e.g. [\"q_proj\", \"v_proj\"])");
  }
  return out;
}

LoraConfig::Init InitOf(const json& v, const std::string& path) {
  if (v.is_null() || (v.is_boolean() && v.get<bool>())) return LoraConfig::Init::kDefault;
  if (v.is_boolean()) return LoraConfig::Init::kRandom;
  if (v == "gaussian") return LoraConfig::Init::kGaussian;
  const std::string s = v.is_string() ? v.get<std::string>() : "";
  const bool moves_base = s == "olora" || s == "corda" || s == "loftq" || s.rfind("pissa", 0) == 0;
  BadConfig(path,
            fmt::format("init_lora_weights is {}; cputrain-numa reads true, false and "
                        "\"gaussian\"",
                        Short(v)),
            moves_base ? std::string("this init changes the base model's weights too: save the "
                                     "adapter with PEFT's path_initial_model_for_weight_conversion "
                                     "(a plain LoRA adapter of the original base), or ") +
                             kMergeWithPeft
                       : "set it to true: A and B are read from the file, and their init mattered "
                         "only before training");
}

// cfg[key] if set: a number in [lo, hi] (hi excluded if hi_open).
float Number(const json& cfg, const char* key, float fallback, double lo, double hi, bool hi_open,
             const char* range, const std::string& path) {
  if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
  const json& v = cfg[key];
  const double d = v.is_number() ? v.get<double>() : NAN;
  if (!(d >= lo && (hi_open ? d < hi : d <= hi))) {
    BadConfig(path, fmt::format("{} is {}, not {}", key, Short(v), range),
              "fix adapter_config.json");
  }
  return static_cast<float>(d);
}

bool Bool(const json& cfg, const char* key, const std::string& path) {
  if (!cfg.contains(key) || cfg[key].is_null()) return false;
  if (!cfg[key].is_boolean()) {
    BadConfig(path, fmt::format("{} is {}, not true or false", key, Short(cfg[key])),
              "fix adapter_config.json");
  }
  return cfg[key].get<bool>();
}

// One tensor of the adapter's file: its name and shape there, and where it lives in the LoRA
// layout (rows x cols of copy `layer` of t, HF's (cols, rows) when transposed).
struct AdapterTensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  Tensor t;
  int layer;
  std::size_t rows, cols;
  bool transpose;
  bool saved;  // a module to save (else an adapter's A or B)
};

// The family's table row of a module to save.
const HfTensor& HfOf(const Shape& s, const LoraSaved& x) {
  const Family& f = FamilyOf(s.arch);
  for (const HfTensor& h : HfTensorsOf(f)) {
    if (h.t != x.t || (h.head >= 0 && h.head != static_cast<int>(s.head))) continue;
    if ((h.head >= 0 ? "" : std::string(f.hf_optional_prefix)) + h.name == x.hf_name) return h;
  }
  throw RuntimeError(fmt::format("no Hugging Face tensor {} in the {} table", x.hf_name, f.name));
}

std::vector<AdapterTensor> AdapterTensors(const Lora& lora) {
  const ParamLayout& L = lora.layout();
  const Shape& s = L.shape();
  const std::size_t r = static_cast<std::size_t>(lora.config().r);
  std::vector<AdapterTensor> out;
  for (const LoraSite& site : lora.sites()) {
    const std::size_t in = static_cast<std::size_t>(site.in), rows = site.rows;
    for (int l = 0; l < s.L; ++l) {
      const std::string module = kPeftKeyPrefix + fmt::format(fmt::runtime(site.module), l);
      out.push_back({module + ".lora_A.weight", {r, in}, site.a, l, r, in, false, false});
      out.push_back({module + ".lora_B.weight", {rows, r}, site.b, l, rows, r, false, false});
    }
  }
  for (const LoraSaved& x : lora.saved()) {
    const HfTensor& h = HfOf(s, x);
    const TensorInfo& info = L.info(x.t);
    std::size_t begin = 0, rows = 0;
    HfRows(HfTensor::kAll, s, info, &begin, &rows);
    const std::size_t cols = info.shape.size() > 1 ? info.shape[1] : 1;
    for (int l = 0; l < (info.per_layer ? s.L : 1); ++l) {
      AdapterTensor a{
          kPeftKeyPrefix + (info.per_layer ? fmt::format(fmt::runtime(x.hf_name), l) : x.hf_name),
          {rows},
          x.t,
          l,
          rows,
          cols,
          h.transpose,
          true};
      if (info.shape.size() > 1) a.shape.push_back(cols);
      if (h.transpose) std::swap(a.shape[0], a.shape[1]);
      out.push_back(std::move(a));
    }
  }
  return out;
}

// The hint for a tensor the file holds and the config does not imply.
std::string UnexpectedHint(const std::string& name) {
  if (name.find("lora_magnitude_vector") != std::string::npos)
    return std::string("it is a DoRA adapter: ") + kMergeWithPeft;
  if (name.find("lora_embedding_") != std::string::npos)
    return std::string("LoRA on an embedding is not supported: ") + kMergeWithPeft;
  if (name.rfind(kPeftKeyPrefix, 0) != 0)
    return "PEFT's tensor names begin with base_model.model.: save the adapter with "
           "PeftModel.save_pretrained";
  return "adapter_config.json (target_modules, modules_to_save) and the weights do not belong "
         "together, or the adapter is for another model";
}

}  // namespace

AdapterInfo ReadAdapterConfig(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw InputError(fmt::format("PEFT adapter '{}' is not a directory", dir),
                     "pass the directory PeftModel.save_pretrained wrote (adapter_config.json "
                     "and adapter_model.safetensors)");
  }
  const std::string path = ConfigPath(dir);
  const std::string text = ReadUtf8File(
      path, InputKind{"PEFT adapter config", "an adapter_config.json file", kMaxConfigBytes,
                      "pass the directory PeftModel.save_pretrained wrote "
                      "(adapter_config.json and adapter_model.safetensors)"});
  const json cfg = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (cfg.is_discarded()) BadConfig(path, "not valid JSON", "save the adapter again with PEFT");
  if (!cfg.is_object()) BadConfig(path, "not a JSON object", "save the adapter again with PEFT");

  const json type = cfg.value("peft_type", json());
  if (type != "LORA") {
    BadConfig(path,
              type.is_null() ? std::string("it has no peft_type")
                             : fmt::format("peft_type is {}; cputrain-numa reads LoRA adapters "
                                           "(\"LORA\") only",
                                           Short(type)),
              type.is_null() ? std::string("PEFT writes \"peft_type\": \"LORA\" for a LoRA adapter")
                             : kMergeWithPeft);
  }
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    const std::string key = it.key();
    const json& v = it.value();
    if (In(kReadKeys, key) || In(kHarmlessKeys, key) || IsOff(v)) continue;
    const Unsupported* u = std::find_if(std::begin(kUnsupported), std::end(kUnsupported),
                                        [&](const Unsupported& x) { return key == x.key; });
    if (u != std::end(kUnsupported)) {
      BadConfig(
          path,
          fmt::format("{} is {}: {}, which cputrain-numa does not apply", key, Short(v), u->what),
          kMergeWithPeft);
    }
    BadConfig(path,
              fmt::format("key '{}' is {}, a setting cputrain-numa does not know (a newer PEFT?)",
                          key, Short(v)),
              std::string("if it does not change the adapter's weights, remove it; otherwise ") +
                  kMergeWithPeft);
  }

  AdapterInfo info;
  LoraConfig& c = info.cfg;
  if (!cfg.contains("r") || !cfg["r"].is_number_integer() || cfg["r"].get<long long>() < 1 ||
      cfg["r"].get<long long>() > 4096) {
    BadConfig(path,
              cfg.contains("r")
                  ? fmt::format("r is {}, not an integer in [1, 4096]", Short(cfg["r"]))
                  : std::string("it has no r (the rank)"),
              "fix adapter_config.json");
  }
  c.r = static_cast<int>(cfg["r"].get<long long>());
  c.alpha = Number(cfg, "lora_alpha", 8.f, 1e-30, 1e6, false, "a number in (0, 1e6]", path);
  c.dropout = Number(cfg, "lora_dropout", 0.f, 0, 1, true, "a number in [0, 1)", path);
  c.target_modules = TargetModules(cfg.value("target_modules", json()), path);
  if (cfg.contains("modules_to_save") && !cfg["modules_to_save"].is_null())
    c.modules_to_save = Names(cfg["modules_to_save"], "modules_to_save", path);
  c.init = InitOf(cfg.value("init_lora_weights", json()), path);
  const json bias = cfg.value("bias", json());
  if (!bias.is_null() && bias != "none") {
    BadConfig(path,
              fmt::format("bias is {}: trained biases of the base, which cputrain-numa does not "
                          "apply (it reads \"none\")",
                          Short(bias)),
              kMergeWithPeft);
  }
  c.rslora = Bool(cfg, "use_rslora", path);
  info.fan_in_fan_out = Bool(cfg, "fan_in_fan_out", path);
  const json task = cfg.value("task_type", json());
  if (!task.is_null()) {
    if (task != "CAUSAL_LM" && task != "QUESTION_ANS" && task != "SEQ_CLS") {
      BadConfig(path,
                fmt::format("task_type is {}; cputrain-numa's models are CAUSAL_LM, "
                            "QUESTION_ANS and SEQ_CLS",
                            Short(task)),
                "use an adapter of a causal language model, a question-answering or a "
                "sequence-classification model");
    }
    info.task_type = task.get<std::string>();
  }
  const json base = cfg.value("base_model_name_or_path", json());
  if (!base.is_null() && !base.is_string()) {
    BadConfig(path, fmt::format("base_model_name_or_path is {}, not a string", Short(base)),
              "fix adapter_config.json");
  }
  if (base.is_string()) info.base_model_name_or_path = base.get<std::string>();
  return info;
}

void LoadAdapter(const std::string& dir, const Lora& lora, float* params) {
  std::error_code ec;
  const fs::path weights = fs::path(dir) / kAdapterFile;
  if (!fs::exists(weights, ec)) {
    const fs::path bin = fs::path(dir) / kAdapterBinFile;
    if (fs::exists(bin, ec)) {
      throw InputError(
          fmt::format("PEFT adapter '{}' has {} (PyTorch's pickle format) and no {}: only "
                      "safetensors are read",
                      dir, kAdapterBinFile, kAdapterFile),
          fmt::format("convert it: python -c \"import torch; from safetensors.torch import "
                      "save_file; save_file(torch.load('{}', weights_only=True), '{}', "
                      "metadata={{'format': 'pt'}})\"",
                      bin.string(), weights.string()));
    }
    throw InputError(fmt::format("PEFT adapter '{}' has no {}", dir, kAdapterFile),
                     "pass the directory PeftModel.save_pretrained wrote (adapter_config.json "
                     "and adapter_model.safetensors)");
  }
  // A LoRA run's step directory records the adapter file's length and CRC32C in its state.bin,
  // as a full run's records model.bin's: every command that loads an adapter (train --adapter
  // and resume, eval, generate, export --merge) comes here, and refuses a damaged one.
  if (ReadStateTrailer((fs::path(dir) / kStateFile).string())) {
    static const InputKind kWeights{"PEFT adapter weights", "an adapter_model.safetensors file",
                                    kMaxCheckpointBytes, "check --adapter"};
    CheckModelDigest(weights.string(), DigestFile(weights.string(), kWeights));
  }
  SafetensorsFile file = SafetensorsFile::Open(weights.string());
  const std::vector<AdapterTensor> want = AdapterTensors(lora);
  std::set<std::string> names;
  for (const AdapterTensor& w : want) names.insert(w.name);
  for (const SafeTensor& t : file.tensors()) {
    if (names.count(t.name)) continue;
    throw InputError(fmt::format("safetensors file '{}' holds tensor '{}', which is not part of "
                                 "this adapter (r={}, target_modules {}, modules_to_save {})",
                                 file.path(), t.name, lora.config().r,
                                 json(lora.TargetNames()).dump(), json(lora.SavedNames()).dump()),
                     UnexpectedHint(t.name));
  }
  const ParamLayout& L = lora.layout();
  std::fill(params, params + L.total(), 0.0f);  // padding rows of a saved vocabulary tensor
  std::vector<float> buf;
  for (const AdapterTensor& w : want) {
    const SafeTensor* t = file.Find(w.name);
    if (!t) {
      throw InputError(
          fmt::format("safetensors file '{}' has no tensor '{}'", file.path(), w.name),
          w.saved ? "the adapter does not hold this module to save: PEFT saves a task head with "
                    "task_type QUESTION_ANS / SEQ_CLS or modules_to_save; check "
                    "adapter_config.json"
                  : "adapter_config.json (target_modules) and the weights do not belong "
                    "together, or the adapter is for another model");
    }
    if (t->shape != w.shape) {
      throw InputError(
          fmt::format("safetensors file '{}': tensor '{}' has shape [{}], expected [{}]{}",
                      file.path(), w.name, fmt::join(t->shape, ", "), fmt::join(w.shape, ", "),
                      w.saved ? "" : fmt::format(" (r = {})", lora.config().r)),
          "adapter_config.json (r) and the weights do not belong together, or the adapter is "
          "for another model (a base of other dimensions)");
    }
    float* dst = params + L.offset(w.t, w.layer);
    const std::size_t n = w.rows * w.cols;  // == t->numel, checked above
    if (!w.transpose) {
      file.ReadF32(*t, dst);
    } else {
      buf.resize(n);
      file.ReadF32(*t, buf.data());
      for (std::size_t c = 0; c < w.cols; ++c)  // the file is (cols, rows)
        for (std::size_t r = 0; r < w.rows; ++r) dst[r * w.cols + c] = buf[c * w.rows + r];
    }
    if (const std::size_t i = FirstNonFinite(dst, n); i < n) {
      const std::size_t at = w.transpose ? (i % w.cols) * w.rows + i / w.cols : i;
      throw InputError(fmt::format("safetensors file '{}': tensor '{}' element {} is {}",
                                   file.path(), w.name, at, dst[i]),
                       "the adapter diverged in training: use an earlier checkpoint of it");
    }
  }
}

void WriteAdapter(const std::string& dir, const Lora& lora, const float* params,
                  const std::string& base_model_name_or_path) {
  const ParamLayout& L = lora.layout();
  const Shape& s = L.shape();
  const LoraConfig& c = lora.config();
  MakeDirs(dir);
  std::deque<std::vector<float>> transposed;  // (a deque: the pointers below stay valid)
  std::vector<SafeTensorOut> out;
  for (const AdapterTensor& w : AdapterTensors(lora)) {
    const float* src = params + L.offset(w.t, w.layer);
    if (w.transpose) {
      std::vector<float>& t = transposed.emplace_back(w.rows * w.cols);
      for (std::size_t r = 0; r < w.rows; ++r)
        for (std::size_t col = 0; col < w.cols; ++col) t[col * w.rows + r] = src[r * w.cols + col];
      src = t.data();
    }
    out.push_back({w.name, w.shape, src});
  }
  bool conv1d = false;  // PEFT sets fan_in_fan_out for GPT-2's Conv1D (stored (in, out))
  for (const LoraSite& site : lora.sites())
    for (const HfTensor& h : FamilyOf(s.arch).hf_tensors)
      if (h.t == site.base && h.transpose) conv1d = true;
  // Floats as their shortest decimal (0.05, not 0.05000000074505806), integers as integers.
  auto number = [](float v) -> json {
    if (v == std::floor(v) && std::fabs(v) < 1e9f) return static_cast<long long>(v);
    return std::stod(fmt::format("{}", v));
  };
  const json init = c.init == LoraConfig::Init::kDefault  ? json(true)
                    : c.init == LoraConfig::Init::kRandom ? json(false)
                                                          : json("gaussian");
  const std::vector<std::string> saved = lora.SavedNames();
  // Every key peft 0.21 writes for a LoraConfig (json.dump with sort_keys: nlohmann's objects
  // are sorted), with its defaults.
  const json cfg = {
      {"alora_invocation_tokens", nullptr},
      {"alpha_pattern", json::object()},
      {"arrow_config", nullptr},
      {"auto_mapping", nullptr},
      {"base_model_name_or_path",
       base_model_name_or_path.empty() ? json() : json(base_model_name_or_path)},
      {"bias", "none"},
      {"corda_config", nullptr},
      {"ensure_weight_tying", false},
      {"eva_config", nullptr},
      {"exclude_modules", nullptr},
      {"fan_in_fan_out", conv1d},
      {"inference_mode", true},
      {"init_lora_weights", init},
      {"kasa_config", nullptr},
      {"layer_replication", nullptr},
      {"layers_pattern", nullptr},
      {"layers_to_transform", nullptr},
      {"loftq_config", json::object()},
      {"lora_alpha", number(c.alpha)},
      {"lora_bias", false},
      {"lora_dropout", c.dropout == 0 ? json(0.0) : number(c.dropout)},
      {"lora_ga_config", nullptr},
      {"megatron_config", nullptr},
      {"megatron_core", "megatron.core"},
      {"modules_to_save", saved.empty() ? json() : json(saved)},
      {"monteclora_config", nullptr},
      {"peft_type", "LORA"},
      {"peft_version", kPeftFormatVersion},
      {"qalora_group_size", 16},
      {"r", c.r},
      {"rank_pattern", json::object()},
      {"revision", nullptr},
      {"target_modules", lora.TargetNames()},
      {"target_parameters", nullptr},
      {"task_type", TaskTypeOf(s.head)},
      {"trainable_token_indices", nullptr},
      {"use_bdlora", nullptr},
      {"use_dora", false},
      {"use_qalora", false},
      {"use_rslora", c.rslora},
      {"velora_config", nullptr},
  };
  // Weights first, the config last (as ExportHf): an interrupted write leaves no new config
  // beside old weights.
  WriteSafetensors((fs::path(dir) / kAdapterFile).string(), std::move(out), {{"format", "pt"}});
  WriteFileAtomic(ConfigPath(dir), cfg.dump(2));
}

std::unique_ptr<Lora> OpenAdapter(const std::string& dir, const ParamLayout& base) {
  const AdapterInfo info = ReadAdapterConfig(dir);
  const Shape& s = base.shape();
  const std::string made_for =
      info.base_model_name_or_path.empty()
          ? std::string("pass the base model the adapter was made for")
          : fmt::format("pass the base model the adapter was made for ({})",
                        info.base_model_name_or_path);
  if (!info.task_type.empty() && info.task_type != TaskTypeOf(s.head)) {
    BadConfig(ConfigPath(dir),
              fmt::format("task_type is {}, but the base is a {} {} model ({})", info.task_type,
                          ArchName(s.arch), HeadName(s.head), TaskTypeOf(s.head)),
              made_for);
  }
  try {
    return std::make_unique<Lora>(base, info.cfg);
  } catch (const InputError& e) {
    throw InputError(fmt::format("PEFT adapter '{}' does not fit this {} model: {}", dir,
                                 ArchName(s.arch), e.what()),
                     made_for + (e.hint().empty() ? "" : "; " + e.hint()));
  }
}

void MergeAdapter(WorkerPool& pool, const std::string& dir, const ParamLayout& base,
                  float* base_params) {
  const std::unique_ptr<Lora> lora = OpenAdapter(dir, base);
  std::vector<float> params(lora->layout().total());
  LoadAdapter(dir, *lora, params.data());
  LoraMerge(pool, *lora, params.data(), base_params);
}

}  // namespace cputrain::model
