#include "model/lora.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "common/error.h"
#include "common/spelling.h"
#include "model/head.h"

namespace cputrain::model {
namespace {

// The (base tensor, part) pairs a site can be, in kind order (Tensor kLoraFirst + 2 kind: A).
struct SiteKind {
  Tensor base;
  HfTensor::Rows part;
  const char* name;  // ours, for the LoRA layout's table and messages
};
constexpr SiteKind kKinds[kLoraSiteKinds] = {{kQkvw, HfTensor::kAll, "qkv"},
                                             {kQkvw, HfTensor::kQ, "q"},
                                             {kQkvw, HfTensor::kK, "k"},
                                             {kQkvw, HfTensor::kV, "v"},
                                             {kAttprojw, HfTensor::kAll, "attproj"},
                                             {kFcw, HfTensor::kAll, "fc"},
                                             {kFcw, HfTensor::kGate, "gate"},
                                             {kFcw, HfTensor::kUp, "up"},
                                             {kFcprojw, HfTensor::kAll, "fcproj"}};
// Names of the adapters' tensors ("lora_q_a"), stable for the table's lifetime.
const char* const kAdapterNames[2 * kLoraSiteKinds] = {
    "lora_qkv_a", "lora_qkv_b",    "lora_q_a",     "lora_q_b",       "lora_k_a",
    "lora_k_b",   "lora_v_a",      "lora_v_b",     "lora_attproj_a", "lora_attproj_b",
    "lora_fc_a",  "lora_fc_b",     "lora_gate_a",  "lora_gate_b",    "lora_up_a",
    "lora_up_b",  "lora_fcproj_a", "lora_fcproj_b"};

int KindOf(Tensor base, HfTensor::Rows part) {
  for (int k = 0; k < kLoraSiteKinds; ++k)
    if (kKinds[k].base == base && kKinds[k].part == part) return k;
  return -1;
}

// PEFT's rule (peft.tuners.tuners_utils.check_target_module_exists for a list): the module's
// path is the name, or ends with "." + the name.
bool Matches(const std::string& path, const std::string& name) {
  return path == name || (path.size() > name.size() &&
                          path.compare(path.size() - name.size(), name.size(), name) == 0 &&
                          path[path.size() - name.size() - 1] == '.');
}

std::string StripWeight(const std::string& name) {
  const std::string suffix = ".weight";
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return name.substr(0, name.size() - suffix.size());
  return "";
}

// One module of the base model as PEFT sees it: its path with {} for the layer, its tensors.
struct Module {
  std::string path;  // "model.layers.{}.self_attn.q_proj", "qa_outputs"
  std::vector<const HfTensor*> tensors;
  bool per_layer = false;
};

// Every module of the model (its HF tensors grouped by module path), in table order. The body's
// paths carry the task model's prefix (GPT2LMHeadModel's "transformer.", BertForQuestionAnswering's
// "bert."), as PEFT names them inside the model it wraps.
std::vector<Module> Modules(const ParamLayout& base) {
  const Shape& s = base.shape();
  const Family& f = FamilyOf(s.arch);
  std::vector<Module> out;
  for (const HfTensor& h : HfTensorsOf(f)) {
    if (!base.has(h.t)) continue;
    if (h.head >= 0 && h.head != static_cast<int>(s.head)) continue;
    std::string name = h.name;
    const std::size_t dot = name.rfind('.');
    std::string path = (h.head >= 0 ? "" : std::string(f.hf_optional_prefix)) + name.substr(0, dot);
    auto it = std::find_if(out.begin(), out.end(), [&](const Module& m) { return m.path == path; });
    if (it == out.end()) {
      out.push_back({path, {}, base.info(h.t).per_layer});
      it = out.end() - 1;
    }
    it->tensors.push_back(&h);
  }
  return out;
}

int Layers(const Module& m, int L) { return m.per_layer ? L : 1; }

std::string PathAt(const Module& m, int layer) {
  return m.per_layer ? fmt::format(fmt::runtime(m.path), layer) : m.path;
}

// How many layers of module m some name of `names` picks (PEFT matches each layer's module on its
// own, so a list may name a module layer by layer: its spelling of "all-linear"); marks the
// names that pick something in *used.
int PickedLayers(const Module& m, const std::vector<std::string>& names, int L,
                 std::vector<bool>* used) {
  int picked = 0;
  for (int l = 0; l < Layers(m, L); ++l) {
    bool any = false;
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (!Matches(PathAt(m, l), names[i])) continue;
      any = true;
      (*used)[i] = true;
    }
    picked += any;
  }
  return picked;
}

// Every layer gets the same adapters: a module is picked in all its layers or in none.
void CheckEveryLayer(const Module& m, int picked, int L, const char* what) {
  if (picked == 0 || picked == Layers(m, L)) return;
  throw InputError(
      fmt::format("LoRA {} name module {} in {} of its {} layers only", what, m.path, picked, L),
      "name the module without its layer index (e.g. q_proj), or in every layer: "
      "every layer gets the same adapters");
}

bool EndsWith(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

// PEFT's names for the modules `chosen` (paths with {}) among `all` (see Lora::TargetNames).
// any_ending: modules_to_save's rule (peft.utils.other._set_trainable: key.endswith(name)), else
// target_modules' (Matches).
std::vector<std::string> PeftNames(const std::vector<Module>& all,
                                   const std::set<std::string>& chosen, int L, bool any_ending) {
  auto picks_only_chosen = [&](const std::string& name) {
    for (const Module& m : all)
      for (int l = 0; l < Layers(m, L); ++l) {
        const std::string p = PathAt(m, l);
        if ((any_ending ? EndsWith(p, name) : Matches(p, name)) && !chosen.count(m.path))
          return false;
      }
    return true;
  };
  std::set<std::string> out;
  for (const Module& m : all) {
    if (!chosen.count(m.path)) continue;
    // The path after the layer index ("self_attn.q_proj"), and its endings at dots, shortest
    // first: each picks module m in every layer.
    const std::size_t at = m.path.find("{}.");
    const std::string tail = m.per_layer ? m.path.substr(at + 3) : m.path;
    std::string name;
    for (std::size_t dot = tail.rfind('.');;
         dot = dot == 0 ? std::string::npos : tail.rfind('.', dot - 1)) {
      const std::string candidate = dot == std::string::npos ? tail : tail.substr(dot + 1);
      if (picks_only_chosen(candidate)) {
        name = candidate;
        break;
      }
      if (dot == std::string::npos) break;
    }
    if (!name.empty()) {
      out.insert(name);
    } else {
      for (int l = 0; l < Layers(m, L); ++l) out.insert(PathAt(m, l));
    }
  }
  return {out.begin(), out.end()};
}

std::string Leaf(const std::string& path) { return path.substr(path.rfind('.') + 1); }

std::string ModuleList(const std::vector<Module>& modules) {
  std::vector<std::string> names;
  for (const Module& m : modules)
    if (std::find(names.begin(), names.end(), Leaf(m.path)) == names.end())
      names.push_back(Leaf(m.path));
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

const char* LoraInitName(LoraConfig::Init init) {
  switch (init) {
    case LoraConfig::Init::kDefault:
      return "default";
    case LoraConfig::Init::kGaussian:
      return "gaussian";
    case LoraConfig::Init::kRandom:
      return "false";
  }
  return "?";
}

LoraConfig::Init LoraInitFromName(const std::string& name) {
  if (name == "default" || name == "true") return LoraConfig::Init::kDefault;
  if (name == "gaussian") return LoraConfig::Init::kGaussian;
  if (name == "false") return LoraConfig::Init::kRandom;
  throw InputError(fmt::format("unknown LoRA init '{}'", name),
                   "use default (PEFT's init_lora_weights=True: A Kaiming-uniform, B zero), "
                   "gaussian, or false (B random too; tests)");
}

namespace {

void CheckLoraConfig(const LoraConfig& cfg) {
  if (cfg.r < 1 || cfg.r > 4096) {
    throw InputError(fmt::format("LoRA rank r = {} is out of range", cfg.r),
                     "set train.lora.r between 1 and 4096 (8 to 64 is usual)");
  }
  if (!(cfg.alpha > 0) || cfg.alpha > 1e6f) {
    throw InputError(fmt::format("LoRA alpha = {} is out of range", cfg.alpha),
                     "set train.lora.alpha to a positive number (PEFT's default 8; often 2r)");
  }
  if (!(cfg.dropout >= 0 && cfg.dropout < 1)) {
    throw InputError(fmt::format("LoRA dropout = {} is out of range", cfg.dropout),
                     "set train.lora.dropout in [0, 1)");
  }
}

// The weight tensor of module m (its ".weight"), or null.
const HfTensor* WeightOf(const Module& m) {
  const HfTensor* w = nullptr;
  for (const HfTensor* h : m.tensors)
    if (!StripWeight(h->name).empty()) w = h;
  return w;
}

bool IsLinear(const Module& m) {
  const HfTensor* w = WeightOf(m);
  return w != nullptr && KindOf(w->t, w->rows) >= 0;
}

// The modules `targets` picks (PEFT's names; "all-linear": every linear layer of the blocks), in
// module order; InputError for a name that picks nothing or a module that is not linear.
std::vector<const Module*> Targeted(const std::vector<Module>& modules,
                                    const std::vector<std::string>& targets, const Shape& s) {
  const bool all_linear = targets.size() == 1 && targets[0] == "all-linear";
  std::vector<bool> used(targets.size(), false);
  std::vector<const Module*> targeted;
  for (const Module& m : modules) {
    const int picked = all_linear ? 0 : PickedLayers(m, targets, s.L, &used);
    CheckEveryLayer(m, picked, s.L, "target_modules");
    const bool linear = IsLinear(m);
    if (picked == 0 && !(all_linear && linear)) continue;
    if (!linear) {
      std::vector<Module> lin;
      for (const Module& x : modules)
        if (IsLinear(x)) lin.push_back(x);
      throw InputError(
          fmt::format("LoRA target module {} is not a linear layer of the blocks", PathAt(m, 0)),
          fmt::format("adapt the blocks' linear layers ({}); train a head or an embedding fully "
                      "with train.lora.modules_to_save",
                      ModuleList(lin)));
    }
    targeted.push_back(&m);
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (used[i] || all_linear) continue;
    throw InputError(fmt::format("LoRA target module '{}' is not in this {} model", targets[i],
                                 ArchName(s.arch)),
                     fmt::format("its modules are: {}", ModuleList(modules)));
  }
  return targeted;
}

// One site per targeted module, in kind order (the order of the table; a product's sites then
// run in row order).
std::vector<LoraSite> Sites(const ParamLayout& base, const std::vector<const Module*>& targeted) {
  std::vector<LoraSite> sites;
  for (int k = 0; k < kLoraSiteKinds; ++k) {
    for (const Module* m : targeted) {
      const HfTensor* w = WeightOf(*m);
      if (KindOf(w->t, w->rows) != k) continue;
      const TensorInfo& info = base.info(w->t);
      std::size_t row0 = 0, rows = 0;
      HfRows(w->rows, base.shape(), info, &row0, &rows);
      LoraSite site;
      site.base = w->t;
      site.part = w->rows;
      site.row0 = static_cast<int>(row0);
      site.rows = static_cast<int>(rows);
      site.in = static_cast<int>(info.shape[1]);
      site.kind = k;
      site.a = static_cast<Tensor>(kLoraFirst + 2 * k);
      site.b = static_cast<Tensor>(kLoraFirst + 2 * k + 1);
      site.module = m->path;
      sites.push_back(site);
    }
  }
  return sites;
}

// The modules to save (cfg.modules_to_save, plus a task model's head, which trains fully as
// PEFT's QUESTION_ANS / SEQ_CLS task types make it: a modules_to_save without being named);
// InputError for a name that picks nothing, part of a fused tensor, or a target too.
std::vector<LoraSaved> Saved(const ParamLayout& base, const std::vector<Module>& modules,
                             std::vector<std::string> save, const std::vector<LoraSite>& sites) {
  const Shape& s = base.shape();
  const Family& f = FamilyOf(s.arch);
  if (s.head != Head::kLm) {
    for (const Module& m : modules) {
      const bool head = std::any_of(m.tensors.begin(), m.tensors.end(),
                                    [](const HfTensor* h) { return h->head >= 0; });
      if (head && std::none_of(save.begin(), save.end(),
                               [&](const std::string& n) { return Matches(m.path, n); }))
        save.push_back(Leaf(m.path));
    }
  }
  std::vector<LoraSaved> saved;
  std::set<Tensor> saved_set;
  std::vector<bool> save_used(save.size(), false);
  for (const Module& m : modules) {
    const int picked = PickedLayers(m, save, s.L, &save_used);
    CheckEveryLayer(m, picked, s.L, "modules_to_save");
    if (picked == 0) continue;
    for (const HfTensor* h : m.tensors) {
      if (h->rows != HfTensor::kAll) {
        throw InputError(fmt::format("module to save '{}' is part of a fused tensor ({} in "
                                     "cputrain-numa)",
                                     Leaf(m.path), base.info(h->t).name),
                         "adapt it with train.lora.target_modules instead");
      }
      if (std::any_of(sites.begin(), sites.end(),
                      [&](const LoraSite& x) { return x.base == h->t; })) {
        throw InputError(
            fmt::format("module '{}' is both a LoRA target and a module to save", Leaf(m.path)),
            "name it in one of train.lora.target_modules and modules_to_save");
      }
      if (saved_set.insert(h->t).second) {
        const std::string prefix = h->head >= 0 ? "" : f.hf_optional_prefix;
        saved.push_back({h->t, prefix + h->name});
      }
    }
  }
  for (std::size_t i = 0; i < save.size(); ++i) {
    if (save_used[i]) continue;
    const std::string& name = save[i];
    const bool tied = name == "lm_head" && !base.has(kLmHead) && s.head == Head::kLm;
    throw InputError(
        tied ? fmt::format("module to save 'lm_head' is tied to the token embedding in this {} "
                           "model",
                           ArchName(s.arch))
             : fmt::format("module to save '{}' is not in this {} model", name, ArchName(s.arch)),
        tied ? std::string("save the embedding instead (its module name)")
             : fmt::format("its modules are: {}", ModuleList(modules)));
  }
  return saved;
}

// The trainable table: saved input tensors, per layer the adapters (and saved per-layer
// tensors), saved output tensors — the base table's order.
std::vector<TensorInfo> TrainableTable(const ParamLayout& base, const LoraConfig& cfg,
                                       const std::vector<LoraSite>& sites,
                                       const std::vector<LoraSaved>& saved) {
  std::set<Tensor> saved_set;
  for (const LoraSaved& x : saved) saved_set.insert(x.t);
  std::vector<TensorInfo> table;
  auto saved_in = [&](bool per_layer, bool before_blocks) {
    bool blocks_seen = false;
    for (const TensorInfo& info : base.tensors()) {
      blocks_seen = blocks_seen || info.per_layer;
      if (info.per_layer != per_layer || !saved_set.count(info.t)) continue;
      if (!per_layer && blocks_seen == before_blocks) continue;
      table.push_back(info);
    }
  };
  saved_in(false, true);
  const Init a_init =
      cfg.init == LoraConfig::Init::kGaussian ? Init::kNormalInvRows : Init::kKaimingUniform;
  const Init b_init = cfg.init == LoraConfig::Init::kRandom ? Init::kKaimingUniform : Init::kZeros;
  for (const LoraSite& site : sites) {
    table.push_back(
        MakeTensor(site.a, kAdapterNames[2 * site.kind], true, true, a_init,
                   {static_cast<std::size_t>(cfg.r), static_cast<std::size_t>(site.in)}));
    table.push_back(
        MakeTensor(site.b, kAdapterNames[2 * site.kind + 1], true, true, b_init,
                   {static_cast<std::size_t>(site.rows), static_cast<std::size_t>(cfg.r)}));
  }
  saved_in(true, false);
  saved_in(false, false);
  if (table.empty()) {
    throw InputError("LoRA trains nothing: no target module and no module to save",
                     "set train.lora.target_modules");
  }
  return table;
}

}  // namespace

Lora::Lora(const ParamLayout& base, const LoraConfig& cfg)
    : base_(base), cfg_(cfg), layout_(base.shape()) {
  CheckLoraConfig(cfg);
  const Family& f = FamilyOf(base.shape().arch);
  const std::vector<Module> modules = Modules(base);
  std::vector<std::string> targets = cfg.target_modules;
  if (targets.empty()) targets.assign(f.lora_default_targets.begin(), f.lora_default_targets.end());
  sites_ = Sites(base, Targeted(modules, targets, base.shape()));
  saved_ = Saved(base, modules, cfg.modules_to_save, sites_);
  for (const LoraSite& site : sites_) by_base_[site.base].push_back(&site);
  layout_ = ParamLayout(base.shape(), TrainableTable(base, cfg, sites_, saved_));
}

const std::vector<const LoraSite*>& Lora::SitesOf(Tensor t) const { return by_base_[t]; }

std::vector<std::string> Lora::TargetNames() const {
  std::set<std::string> chosen;
  for (const LoraSite& site : sites_) chosen.insert(site.module);
  return PeftNames(Modules(base_), chosen, base_.shape().L, /*any_ending=*/false);
}

std::vector<std::string> Lora::SavedNames() const {
  std::set<std::string> chosen;
  for (const LoraSaved& x : saved_) chosen.insert(x.hf_name.substr(0, x.hf_name.rfind('.')));
  return PeftNames(Modules(base_), chosen, base_.shape().L, /*any_ending=*/true);
}

std::string Lora::Describe() const {
  const double trainable = static_cast<double>(layout_.total());
  const double all = static_cast<double>(base_.total());
  std::string what = fmt::format("{}", fmt::join(TargetNames(), ", "));
  if (!saved_.empty()) what += fmt::format("; training fully {}", fmt::join(SavedNames(), ", "));
  return fmt::format("LoRA r={} alpha={:g} dropout={:g} on {}: {} trainable of {} ({:.2f}%)",
                     cfg_.r, cfg_.alpha, cfg_.dropout, what, layout_.total(), base_.total(),
                     100.0 * trainable / all);
}

std::size_t Lora::ActFloats(int B, int T) const {
  const std::size_t N = static_cast<std::size_t>(B) * T, r = cfg_.r;
  std::size_t in = 0;
  for (const LoraSite& site : sites_) in = std::max<std::size_t>(in, site.in);
  // Per layer and site its h = x A^T (N, r); then dh (N, r) and the dropped input (N, in).
  return base_.shape().L * sites_.size() * N * r + N * r + (cfg_.dropout > 0 ? N * in : 0);
}

void LoraInit(WorkerPool& pool, const Lora& lora, uint64_t seed, const float* base, float* params) {
  RandomInit(pool, lora.layout(), seed, params);
  const ParamLayout& L = lora.layout();
  for (const LoraSaved& x : lora.saved()) {
    const TensorInfo& info = L.info(x.t);
    for (int l = 0; l < (info.per_layer ? L.shape().L : 1); ++l)
      std::copy_n(base + lora.base().offset(x.t, l), info.numel, params + L.offset(x.t, l));
  }
}

void LoraMerge(WorkerPool& pool, const Lora& lora, const float* params, float* base) {
  const ParamLayout& L = lora.layout();
  const ParamLayout& B = lora.base();
  const int r = lora.config().r;
  const float scale = lora.scale();
  for (const LoraSite& site : lora.sites()) {
    for (int l = 0; l < L.shape().L; ++l) {
      const float* a = params + L.offset(site.a, l);  // (r, in)
      const float* b = params + L.offset(site.b, l);  // (rows, r)
      float* w = base + B.offset(site.base, l) + static_cast<std::size_t>(site.row0) * site.in;
      pool.ParallelFor(site.rows, [&](std::size_t i0, std::size_t i1, int) {
        std::vector<float> acc(site.in);
        for (std::size_t i = i0; i < i1; ++i) {
          std::fill(acc.begin(), acc.end(), 0.f);
          for (int k = 0; k < r; ++k) {
            const float bik = b[i * r + k];
            const float* ak = a + static_cast<std::size_t>(k) * site.in;
            for (int j = 0; j < site.in; ++j) acc[j] += bik * ak[j];
          }
          float* wi = w + i * site.in;
          for (int j = 0; j < site.in; ++j) wi[j] += scale * acc[j];
        }
      });
    }
  }
  for (const LoraSaved& x : lora.saved()) {
    const TensorInfo& info = L.info(x.t);
    for (int l = 0; l < (info.per_layer ? L.shape().L : 1); ++l)
      std::copy_n(params + L.offset(x.t, l), info.numel, base + B.offset(x.t, l));
  }
}

}  // namespace cputrain::model
