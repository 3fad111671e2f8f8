#include "model/hf.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "common/utf8.h"
#include "model/family.h"
#include "model/head.h"
#include "model/hf_config.h"
#include "model/safetensors.h"

namespace cputrain::model {

void HfRows(HfTensor::Rows part, const Shape& s, const TensorInfo& info, std::size_t* begin,
            std::size_t* rows) {
  const std::size_t hs = s.head_size(), q = s.NH * hs, kv = s.kv_heads() * hs, f = s.ffn();
  switch (part) {
    case HfTensor::kAll:
      *begin = 0, *rows = info.real_rows ? info.real_rows : info.shape[0];
      return;
    case HfTensor::kQ:
      *begin = 0, *rows = q;
      return;
    case HfTensor::kK:
      *begin = q, *rows = kv;
      return;
    case HfTensor::kV:
      *begin = q + kv, *rows = kv;
      return;
    case HfTensor::kGate:
      *begin = 0, *rows = f;
      return;
    case HfTensor::kUp:
      *begin = f, *rows = f;
      return;
  }
}

std::vector<HfView> HfViews(const ParamLayout& layout) {
  const Shape& s = layout.shape();
  std::vector<HfView> views;
  std::vector<bool> named(kNumTensors, false);  // tensors the family's hf_tensors cut
  const auto add = [&](const TensorInfo& info, std::size_t begin, std::size_t rows) {
    const bool matrix = info.shape.size() >= 2;
    const std::size_t row = matrix ? info.numel / info.shape[0] : 1;  // floats per row
    for (int l = 0; l < (info.per_layer ? s.L : 1); ++l) {
      views.push_back({layout.offset(info.t, l) + begin * row, matrix ? rows : 1,
                       matrix ? row : rows, matrix, info.decay});
    }
  };
  bool lora = false;
  for (const TensorInfo& info : layout.tensors()) lora = lora || info.t >= kLoraFirst;
  if (!lora) {
    std::set<std::pair<int, int>> seen;  // (tensor, part): a family may name one twice
    for (const HfTensor& h : FamilyOf(s.arch).hf_tensors) {
      if (!layout.has(h.t) || (h.head >= 0 && h.head != static_cast<int>(s.head))) continue;
      if (!seen.insert({h.t, h.rows}).second) continue;
      std::size_t begin = 0, rows = 0;
      HfRows(h.rows, s, layout.info(h.t), &begin, &rows);
      add(layout.info(h.t), begin, rows);
      named[h.t] = true;
    }
  }
  for (const TensorInfo& info : layout.tensors()) {
    if (!named[info.t]) add(info, 0, info.real_rows ? info.real_rows : info.shape[0]);
  }
  std::sort(views.begin(), views.end(),
            [](const HfView& a, const HfView& b) { return a.offset < b.offset; });
  return views;
}

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kTiedHeadName = "lm_head.weight";

// One Hugging Face tensor of a layout, resolved: its name, HF shape and where it lives in ours.
struct Placed {
  std::string name;
  std::vector<std::uint64_t> shape;  // HF's
  Tensor t;
  int layer;
  std::size_t row_begin, rows, cols;  // rows [row_begin, +rows) of our (rows x cols) tensor copy
  bool transpose;
  bool head;  // a task head's: never under the family's optional prefix
};

std::vector<Placed> Placements(const ParamLayout& layout) {
  const Shape& s = layout.shape();
  std::vector<Placed> out;
  for (const HfTensor& h : HfTensorsOf(FamilyOf(s.arch))) {
    if (!layout.has(h.t)) continue;  // an optional tensor this model has not (biases, lm_head)
    if (h.head >= 0 && h.head != static_cast<int>(s.head)) continue;  // another head's
    const TensorInfo& info = layout.info(h.t);
    std::size_t begin = 0, rows = 0;
    HfRows(h.rows, s, info, &begin, &rows);
    const std::size_t cols = info.shape.size() > 1 ? info.shape[1] : 1;
    for (int l = 0; l < (info.per_layer ? s.L : 1); ++l) {
      Placed p{info.per_layer ? fmt::format(fmt::runtime(h.name), l) : h.name,
               {rows},
               h.t,
               l,
               begin,
               rows,
               cols,
               h.transpose,
               h.head >= 0};
      if (info.shape.size() > 1) p.shape.push_back(cols);
      if (h.transpose) std::swap(p.shape[0], p.shape[1]);
      out.push_back(std::move(p));
    }
  }
  return out;
}

// Copies HF data (in HF's layout) into our tensor's rows, or back.
void ToOurs(const Placed& p, const float* hf, float* ours) {
  float* dst = ours + p.row_begin * p.cols;
  if (!p.transpose) {
    std::memcpy(dst, hf, p.rows * p.cols * sizeof(float));
    return;
  }
  for (std::size_t c = 0; c < p.cols; ++c)  // hf is (cols, rows)
    for (std::size_t r = 0; r < p.rows; ++r) dst[r * p.cols + c] = hf[c * p.rows + r];
}
void ToHf(const Placed& p, const float* ours, float* hf) {
  const float* src = ours + p.row_begin * p.cols;
  if (!p.transpose) {
    std::memcpy(hf, src, p.rows * p.cols * sizeof(float));
    return;
  }
  for (std::size_t r = 0; r < p.rows; ++r)
    for (std::size_t c = 0; c < p.cols; ++c) hf[c * p.rows + r] = src[r * p.cols + c];
}

json ReadConfig(const std::string& dir, std::string* path) {
  *path = (fs::path(dir) / kHfConfigFile).string();
  const std::string text =
      ReadUtf8File(*path, InputKind{"Hugging Face config", "a config.json file", kMaxConfigBytes,
                                    "pass a Hugging Face model directory"});
  json cfg = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (cfg.is_discarded()) hf::BadConfig(*path, "not valid JSON", "fix config.json");
  if (!cfg.is_object()) hf::BadConfig(*path, "not a JSON object", "fix config.json");
  return cfg;
}

// The weights of a directory: one model.safetensors, or the shards an index names.
class Weights {
 public:
  explicit Weights(const std::string& dir) {
    std::error_code ec;
    const fs::path single = fs::path(dir) / kHfWeightsFile, index = fs::path(dir) / kHfIndexFile;
    if (fs::exists(single, ec)) {
      files_.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::Open(single.string())));
      return;
    }
    const std::string text = ReadUtf8File(
        index.string(), InputKind{"safetensors index", "a model.safetensors.index.json",
                                  kMaxConfigBytes, "pass a Hugging Face model directory"});
    const json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object()) {
      throw InputError(fmt::format("'{}' is not a safetensors index: it needs a \"weight_map\" "
                                   "object of tensor name -> file",
                                   index.string()),
                       "re-create it with save_pretrained, or save the model unsharded");
    }
    std::map<std::string, std::size_t> opened;
    for (const auto& [name, file] : j["weight_map"].items()) {
      const std::string f = file.is_string() ? file.get<std::string>() : "";
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
        throw InputError(fmt::format("'{}': tensor '{}' maps to {}, not a file name in the "
                                     "directory",
                                     index.string(), name, file.dump()),
                         "fix the index's weight_map");
      }
      if (!opened.count(f)) {
        opened[f] = files_.size();
        files_.push_back(
            std::make_unique<SafetensorsFile>(SafetensorsFile::Open((fs::path(dir) / f).string())));
      }
    }
    RefuseRepeatedTensors(index.string());
  }
  // The file holding `name` and its entry, or {null, null}.
  std::pair<SafetensorsFile*, const SafeTensor*> Find(const std::string& name) {
    for (auto& f : files_)
      if (const SafeTensor* t = f->Find(name)) return {f.get(), t};
    return {nullptr, nullptr};
  }
  std::vector<std::pair<std::string, std::string>> Names() const {  // (file, tensor)
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& f : files_)
      for (const SafeTensor& t : f->tensors()) out.emplace_back(f->path(), t.name);
    return out;
  }
  std::string Describe() const {
    return files_.size() == 1 ? files_[0]->path() : fmt::format("{} shards", files_.size());
  }

 private:
  // A tensor stored in two shards makes one directory two models: transformers loads the later
  // shard's copy, an index-first reader the index's. Refused, naming both files.
  void RefuseRepeatedTensors(const std::string& index) const {
    std::map<std::string_view, const std::string*> seen;  // tensor -> the file that holds it
    for (const auto& f : files_) {
      for (const SafeTensor& t : f->tensors()) {
        auto [it, fresh] = seen.emplace(t.name, &f->path());
        if (fresh) continue;
        const auto [a, b] = std::minmax(*it->second, f->path());
        throw InputError(fmt::format("tensor '{}' is stored twice, in '{}' and in '{}' (the "
                                     "shards of '{}')",
                                     t.name, a, b, index),
                         "keep one copy: transformers would load one and this engine the other. "
                         "Re-save the model with save_pretrained");
      }
    }
  }

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
};

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Reads `name` (exactly `shape`) into buf.
// Tensor `name` of the weights, checked to have `shape`, as fp32 into out (its numel floats; the
// file's numel is known once the shape is checked).
void ReadTo(Weights& w, const std::string& name, const std::vector<std::uint64_t>& shape,
            float* out) {
  auto [file, t] = w.Find(name);
  if (!t) {
    throw InputError(fmt::format("the weights ({}) have no tensor '{}'", w.Describe(), name),
                     "the weights are not a model of config.json's shape, or are incomplete");
  }
  if (t->shape != shape) {
    throw InputError(
        fmt::format("safetensors file '{}': tensor '{}' has shape [{}], config.json "
                    "implies [{}]",
                    file->path(), name, fmt::join(t->shape, ", "), fmt::join(shape, ", ")),
        "config.json and the weights do not belong together");
  }
  file->ReadF32(*t, out);
}

std::uint64_t Numel(const std::vector<std::uint64_t>& shape) {
  std::uint64_t n = 1;
  for (std::uint64_t d : shape) n *= d;
  return n;
}

void Read(Weights& w, const std::string& name, const std::vector<std::uint64_t>& shape,
          std::vector<float>& buf) {
  buf.resize(Numel(shape));
  ReadTo(w, name, shape, buf.data());
}

// Reads every placed tensor of `w` into params, layer by layer: each tensor copy is zeroed first
// (its padding rows), checked finite part by part, and told to done once its every part is in; a
// task head the weights lack (no `as_stored` name in them) is initialized from head_seed, its
// name added to *initialized. Tensors no placement covers are zeros, told to done first.
void ReadPlaced(Weights& w, const std::string& dir, const ParamLayout& layout,
                std::vector<Placed> placed,
                const std::function<std::string(const Placed&)>& as_stored, uint64_t head_seed,
                float* params, TensorDone done, std::vector<std::string>* initialized) {
  // The tensors outside the blocks first, then the blocks' layer by layer (params.h, TensorDone).
  auto rank = [&](const Placed& p) { return layout.info(p.t).per_layer ? p.layer + 1 : 0; };
  std::stable_sort(placed.begin(), placed.end(),
                   [&](const Placed& a, const Placed& b) { return rank(a) < rank(b); });
  std::map<std::pair<int, int>, int> parts;  // (tensor, layer) -> parts not yet read
  for (const Placed& p : placed) ++parts[{static_cast<int>(p.t), p.layer}];
  for (const TensorInfo& info : layout.tensors()) {
    for (int l = 0; l < (info.per_layer ? layout.shape().L : 1); ++l) {
      if (parts.count({static_cast<int>(info.t), l})) continue;
      std::fill_n(params + layout.offset(info.t, l), info.numel, 0.0f);
      done(info.t, l);
    }
  }
  std::vector<float> buf;
  std::set<std::pair<int, int>> started;
  for (const Placed& p : placed) {
    const std::pair<int, int> key{static_cast<int>(p.t), p.layer};
    float* dst = params + layout.offset(p.t, p.layer);
    if (started.insert(key).second) std::fill_n(dst, layout.info(p.t).numel, 0.0f);
    const std::string name = as_stored(p);
    if (p.head && w.Find(name).second == nullptr) {
      // A pretrained body without this task's head: a new head, as transformers makes one.
      RandomInitTensor(layout, p.t, head_seed, params);
      initialized->push_back(name);
    } else {
      // Read in place where our rows are the file's (no transpose): no second copy of the tensor.
      const float* got = dst + p.row_begin * p.cols;
      if (p.transpose) {
        Read(w, name, p.shape, buf);
        got = buf.data();
      } else {
        ReadTo(w, name, p.shape, dst + p.row_begin * p.cols);
      }
      const std::size_t n = p.rows * p.cols;
      if (const std::size_t i = FirstNonFinite(got, n); i < n) {
        throw InputError(
            fmt::format("checkpoint '{}': tensor '{}', element {} is {}", dir, name, i, got[i]),
            kDivergedHint);
      }
      if (p.transpose) ToOurs(p, buf.data(), dst);
    }
    if (--parts[key] == 0) done(p.t, p.layer);
  }
}

}  // namespace

namespace hf {

void BadConfig(const std::string& path, const std::string& what, const std::string& hint) {
  throw InputError(fmt::format("Hugging Face config '{}': {}", path, what), hint);
}

int IntKey(const json& cfg, const std::string& key, const std::string& path, int max,
           int fallback) {
  if (!cfg.contains(key) || (cfg[key].is_null() && fallback > 0)) {
    if (fallback > 0) return fallback;
    BadConfig(path, fmt::format("key '{}' is missing", key), "config.json of this family has it");
  }
  const json& v = cfg[key];
  if (!v.is_number_integer() || v.get<long long>() < 1 || v.get<long long>() > max) {
    BadConfig(path, fmt::format("{} is {}, not an integer in [1, {}]", key, v.dump(), max),
              "fix config.json");
  }
  return static_cast<int>(v.get<long long>());
}

double FloatKey(const json& cfg, const std::string& key, const std::string& path, double fallback) {
  if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
  const json& v = cfg[key];
  if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
    BadConfig(path, fmt::format("{} is {}, not a positive number", key, v.dump()),
              "fix config.json");
  }
  return v.get<double>();
}

bool BoolKey(const json& cfg, const std::string& key, const std::string& path, bool fallback) {
  if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
  if (!cfg[key].is_boolean()) {
    BadConfig(path, fmt::format("{} is {}, not true or false", key, cfg[key].dump()),
              "fix config.json");
  }
  return cfg[key].get<bool>();
}

void FixedKey(const json& cfg, const std::string& key, const std::vector<json>& ok,
              const std::string& path, const std::string& family) {
  if (!cfg.contains(key) || cfg[key].is_null()) return;
  for (const json& v : ok)
    if (cfg[key] == v) return;
  BadConfig(path,
            fmt::format("{} is {}; cputrain-numa's {} runs only {}", key, cfg[key].dump(), family,
                        json(ok).dump()),
            "this model is not a " + family + " this engine can run");
}

}  // namespace hf

bool IsHfDir(const std::string& path) {
  std::error_code ec;
  // Any config.json (or a link to one, even dangling): one that is a FIFO, a directory or
  // /dev/zero is then refused by ReadConfig for what it is, not taken for "not a checkpoint".
  return fs::is_directory(path, ec) &&
         fs::symlink_status(fs::path(path) / kHfConfigFile, ec).type() != fs::file_type::not_found;
}

Shape ReadHfShape(const std::string& dir, std::optional<HeadSpec> head, bool need_weights) {
  std::string path;
  json cfg = ReadConfig(dir, &path);
  const std::string type = cfg.contains("model_type") && cfg["model_type"].is_string()
                               ? cfg["model_type"].get<std::string>()
                               : "";
  const Family* family = FamilyOfHfType(type);
  if (!family) {
    std::string types;
    for (const Family* f : Families()) {
      types += (types.empty() ? "" : ", ") + std::string(f->hf_model_type);
      for (const HfRefusedType& r : f->hf_refused_types) {
        if (type != r.model_type) continue;
        hf::BadConfig(
            path,
            fmt::format("model_type '{}' is {}, which this engine does not run", type, r.what),
            fmt::format("use a {} checkpoint (model_type {})", f->hf_architecture,
                        f->hf_model_type));
      }
    }
    hf::BadConfig(path,
                  type.empty()
                      ? "it has no model_type"
                      : fmt::format("model_type '{}' is not a family this engine runs", type),
                  "cputrain-numa runs model_type " + types);
  }
  std::error_code ec;
  if (need_weights && !fs::exists(fs::path(dir) / kHfWeightsFile, ec) &&
      !fs::exists(fs::path(dir) / kHfIndexFile, ec)) {
    throw InputError(fmt::format("'{}' has config.json but neither {} nor {}", dir, kHfWeightsFile,
                                 kHfIndexFile),
                     "only safetensors weights are read: save the model with "
                     "save_pretrained(safe_serialization=True) or download its .safetensors "
                     "files");
  }
  Shape s = family->from_hf_config(cfg, path);
  s.arch = family->arch;
  ReadHfHead(cfg, path, &s);  // the head its architectures name (model/head.h)
  const char* want = !head                           ? ""
                     : head->head == Head::kClassify ? family->hf_classify_architecture
                     : head->head == Head::kSpan     ? family->hf_span_architecture
                                                     : family->hf_architecture;
  if (head && s.head != head->head && *want != '\0') {
    // Read as the task model the caller trains: a new head over the checkpoint's body. (A family
    // without that head keeps its own: the caller names what it cannot run.)
    cfg["architectures"] = json::array({want});
    s = family->from_hf_config(cfg, path);
    s.arch = family->arch;
    ReadHfHead(cfg, path, &s);
  }
  if (head && s.head == Head::kClassify) {  // the outputs and loss the caller trains
    if (head->labels > 0) s.labels = head->labels;
    if (head->problem) s.problem = *head->problem;
    if (!s.encoder() && s.pad_token < 0) s.pad_token = head->pad_token;
  }
  const std::string problem = s.Problem();
  if (!problem.empty()) {
    hf::BadConfig(path,
                  fmt::format("it describes an impossible model ({}): {}", s.ToString(), problem),
                  "fix config.json");
  }
  return s;
}

// Old TensorFlow-converted BERT saves name LayerNorm's weight and bias gamma and beta.
std::string CanonicalName(const std::string& name) {
  for (const auto& [old, now] : {std::pair{"LayerNorm.gamma", "LayerNorm.weight"},
                                 std::pair{"LayerNorm.beta", "LayerNorm.bias"}}) {
    if (EndsWith(name, old)) return name.substr(0, name.size() - std::strlen(old)) + now;
  }
  return name;
}

void LoadHf(const std::string& dir, const ParamLayout& layout, float* params, uint64_t head_seed) {
  LoadHf(dir, layout, params, head_seed, [](Tensor, int) {});
}

void LoadHf(const std::string& dir, const ParamLayout& layout, float* params, uint64_t head_seed,
            TensorDone done) {
  HeadSpec spec(layout.shape().head);
  spec.labels = layout.shape().labels;
  spec.problem = layout.shape().problem;
  spec.pad_token = layout.shape().pad_token;
  const Shape s = ReadHfShape(dir, spec);
  if (!(s == layout.shape())) {
    throw InputError(
        fmt::format("'{}' has shape {}, expected {}", dir, s.ToString(), layout.shape().ToString()),
        "use a checkpoint of this model");
  }
  const Family& family = FamilyOf(s.arch);
  Weights w(dir);
  const std::vector<Placed> placed = Placements(layout);
  // The file's names, old spellings read as today's: canonical -> as stored.
  std::map<std::string, std::string> stored;
  for (const auto& entry : w.Names()) stored[CanonicalName(entry.second)] = entry.second;
  // The prefix some saves have (GPT2Model vs GPT2LMHeadModel, BertModel vs
  // BertForQuestionAnswering): taken if the first tensor has it. Heads never have it.
  const std::string optional = family.hf_optional_prefix;
  const std::string prefix =
      !optional.empty() && stored.count(optional + placed.front().name) ? optional : "";
  auto full_name = [&](const Placed& p) { return p.head ? p.name : prefix + p.name; };
  std::set<std::string> wanted;
  for (const Placed& p : placed) wanted.insert(full_name(p));
  std::vector<std::string> dropped;
  for (const auto& entry : w.Names()) {
    // (clang 14 cannot capture a structured binding in the lambda below)
    const std::string &file = entry.first, &name = CanonicalName(entry.second);
    const bool lm = s.head == Head::kLm;
    if (wanted.count(name) || (name == kTiedHeadName && !layout.has(kLmHead) && lm)) continue;
    auto has_suffix = [&](const char* sfx) { return EndsWith(name, sfx); };
    if (std::any_of(family.hf_ignored_suffixes.begin(), family.hf_ignored_suffixes.end(),
                    has_suffix))
      continue;
    auto under = [&](const char* pfx) { return name.rfind(pfx, 0) == 0; };
    // A decoder read as a classifier drops its LM head, as transformers does.
    if (std::any_of(family.hf_dropped_prefixes.begin(), family.hf_dropped_prefixes.end(), under) ||
        (!lm && under("lm_head."))) {
      dropped.push_back(name);
      continue;
    }
    throw InputError(fmt::format("safetensors file '{}' holds tensor '{}', which is not part of "
                                 "a {} of config.json's shape ({})",
                                 file, name, family.hf_architecture, s.ToString()),
                     "pass the save of a " + std::string(family.hf_architecture) +
                         " whose config.json matches its weights");
  }
  if (!dropped.empty()) {
    log::Info(
        "{}: {} tensor(s) of other heads not used by this {} model (as transformers "
        "drops them when fine-tuning): {}{}",
        dir, dropped.size(), HeadName(s.head),
        fmt::join(dropped.begin(), dropped.begin() + std::min<std::size_t>(dropped.size(), 4),
                  ", "),
        dropped.size() > 4 ? ", ..." : "");
  }
  std::vector<std::string> initialized;
  auto as_stored = [&](const Placed& p) {
    const std::string name = full_name(p);
    return stored.count(name) ? stored[name] : name;
  };
  ReadPlaced(w, dir, layout, placed, as_stored, head_seed, params, done, &initialized);
  if (!initialized.empty()) {
    log::Info(
        "{}: no {} in the weights: newly initialized (normal(0, 0.02), zero bias), to be "
        "trained by this task",
        dir, fmt::join(initialized, ", "));
  }
  // A tied head saved anyway must be the embedding.
  if (s.head == Head::kLm && !layout.has(kLmHead) && w.Find(kTiedHeadName).second) {
    const std::size_t n = static_cast<std::size_t>(s.V) * s.C;
    std::vector<float> buf;
    Read(w, kTiedHeadName, {static_cast<std::uint64_t>(s.V), static_cast<std::uint64_t>(s.C)}, buf);
    if (std::memcmp(buf.data(), params + layout.offset(kWte), n * sizeof(float)) != 0) {
      throw InputError(
          fmt::format("the weights in '{}': lm_head.weight differs from the token embedding, but "
                      "config.json ties them",
                      dir),
          family.hf_untied_hint);
    }
  }
}

std::string HfConfigJson(const Shape& s) {
  json cfg = FamilyOf(s.arch).to_hf_config(s);
  WriteHfHead(s, &cfg);  // a classifier's keys (model/head.h)
  return cfg.dump(2) + "\n";
}

std::vector<HfTensorData> ToHfTensors(const ParamLayout& layout, const float* flat) {
  std::vector<HfTensorData> out;
  for (const Placed& p : Placements(layout)) {
    HfTensorData d{p.name, p.shape, std::vector<float>(p.rows * p.cols), p.head};
    ToHf(p, flat + layout.offset(p.t, p.layer), d.data.data());
    out.push_back(std::move(d));
  }
  return out;
}

void ExportHf(const std::string& dir, const ParamLayout& layout, const float* params) {
  const Shape& s = layout.shape();
  MakeDirs(dir);
  const std::string prefix = FamilyOf(s.arch).hf_optional_prefix;  // the LM-head model's names
  const std::vector<HfTensorData> tensors = ToHfTensors(layout, params);
  std::vector<SafeTensorOut> out;
  for (const HfTensorData& t : tensors)
    out.push_back({t.head ? t.name : prefix + t.name, t.shape, t.data.data()});
  // Weights first, config.json last: a directory whose export was interrupted has no new
  // config.json beside half-written weights (each file is itself atomic).
  WriteSafetensors((fs::path(dir) / kHfWeightsFile).string(), std::move(out), {{"format", "pt"}});
  WriteFileAtomic((fs::path(dir) / kHfConfigFile).string(), HfConfigJson(s));
}

}  // namespace cputrain::model
