#include "config/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>

#include "common/error.h"
#include "common/files.h"
#include "common/spelling.h"
#include "common/utf8.h"
#include "model/limits.h"

namespace cputrain {
namespace {

// Where a value came from, for messages: "configs/x.yaml:12" or "--set model.layers=3".
struct Origin {
  std::string where;
};

using ParseFn = std::function<void(const YAML::Node&, const Origin&, Config&)>;
using DumpFn = std::function<YAML::Node(const Config&)>;

struct Key {
  std::string section;  // "" = top-level scalar
  std::string key;
  std::string type;
  std::string description;
  ParseFn parse;
  DumpFn dump;
  std::string full() const { return section.empty() ? key : section + "." + key; }
};

std::string Show(const YAML::Node& n) {
  if (n.IsScalar()) return fmt::format("'{}'", n.Scalar());
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

[[noreturn]] void Bad(const Origin& o, const std::string& name, const std::string& type,
                      const YAML::Node& n) {
  throw InputError(fmt::format("{}: {} must be {}, not {}", o.where, name, type, Show(n)),
                   "see docs/config.md for every key, its type and its default");
}

long long AsInteger(const YAML::Node& n, const Origin& o, const std::string& name,
                    const std::string& type, long long lo, long long hi) {
  long long v = 0;
  if (!n.IsScalar() || !YAML::convert<long long>::decode(n, v) || v < lo || v > hi) {
    Bad(o, name, type, n);
  }
  return v;
}

double AsNumber(const YAML::Node& n, const Origin& o, const std::string& name,
                const std::string& type, double lo, double hi) {
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v) || v < lo ||
      v > hi) {
    Bad(o, name, type, n);
  }
  return v;
}

bool AsBool(const YAML::Node& n, const Origin& o, const std::string& name) {
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) Bad(o, name, "true or false", n);
  return v;
}

std::string AsString(const YAML::Node& n, const Origin& o, const std::string& name) {
  if (n.IsNull()) return "";
  if (!n.IsScalar()) Bad(o, name, "a string", n);
  // Paths, names and topology specs hold no control characters; one (a stray carriage return
  // of a file saved with CRLF line ends) would not survive the config's YAML dump either: the
  // emitter writes it plain and the reader takes it for a line break (found by fuzz_config).
  for (const char ch : n.Scalar()) {
    const auto u = static_cast<unsigned char>(ch);
    if (u < 0x20 || u == 0x7f) {
      throw InputError(fmt::format("{}: {} holds the control character 0x{:02x}", o.where, name, u),
                       "remove it (a file saved with CRLF line ends: convert it to LF)");
    }
  }
  return n.Scalar();
}

std::string AsChoice(const YAML::Node& n, const Origin& o, const std::string& name,
                     const std::vector<std::string>& choices) {
  std::string type = "one of ";
  for (std::size_t i = 0; i < choices.size(); ++i) type += (i ? ", " : "") + choices[i];
  if (!n.IsScalar()) Bad(o, name, type, n);
  std::string v = n.Scalar();
  if (std::find(choices.begin(), choices.end(), v) == choices.end()) Bad(o, name, type, n);
  return v;
}

// Keys are declared with these builders: each gives the parse and the dump of one field.
constexpr long long kIntMax = std::numeric_limits<int>::max();

// `hi` bounds sizes that would otherwise overflow or exhaust memory (model/limits.h); a value
// above it gets a message of its own that names the limit.
Key IntKey(std::string section, std::string key, std::string desc, long long lo,
           std::function<int&(Config&)> field, long long hi = kIntMax) {
  std::string type = fmt::format("an integer >= {}", lo);
  if (hi != kIntMax) desc += fmt::format(" (at most {})", hi);
  Key k{section, key, type, std::move(desc), nullptr, nullptr};
  std::string name = k.full();
  k.parse = [=](const YAML::Node& n, const Origin& o, Config& c) {
    const long long v = AsInteger(n, o, name, type, lo, kIntMax);
    if (v > hi) {
      throw InputError(fmt::format("{}: {} is {}, more than {}, the most this build supports",
                                   o.where, name, v, hi),
                       "see docs/config.md for the limits of the model's dimensions");
    }
    field(c) = static_cast<int>(v);
  };
  k.dump = [=](const Config& c) { return YAML::Node(field(const_cast<Config&>(c))); };
  return k;
}

Key NumberKey(std::string section, std::string key, std::string desc, double lo, double hi,
              std::function<double&(Config&)> field) {
  std::string type = hi == std::numeric_limits<double>::infinity()
                         ? fmt::format("a number >= {}", lo)
                         : fmt::format("a number in [{}, {}]", lo, hi);
  Key k{section, key, type, std::move(desc), nullptr, nullptr};
  std::string name = k.full();
  k.parse = [=](const YAML::Node& n, const Origin& o, Config& c) {
    field(c) = AsNumber(n, o, name, type, lo, hi);
  };
  // Shortest text that reads back to the same double ("0.0003", not "0.00029999999999999997").
  k.dump = [=](const Config& c) {
    return YAML::Node(fmt::format("{}", field(const_cast<Config&>(c))));
  };
  return k;
}

Key BoolKey(std::string section, std::string key, std::string desc,
            std::function<bool&(Config&)> field) {
  Key k{section, key, "true or false", std::move(desc), nullptr, nullptr};
  std::string name = k.full();
  k.parse = [=](const YAML::Node& n, const Origin& o, Config& c) { field(c) = AsBool(n, o, name); };
  k.dump = [=](const Config& c) { return YAML::Node(field(const_cast<Config&>(c))); };
  return k;
}

Key StringKey(std::string section, std::string key, std::string desc,
              std::function<std::string&(Config&)> field) {
  Key k{section, key, "a string", std::move(desc), nullptr, nullptr};
  std::string name = k.full();
  k.parse = [=](const YAML::Node& n, const Origin& o, Config& c) {
    field(c) = AsString(n, o, name);
  };
  k.dump = [=](const Config& c) { return YAML::Node(field(const_cast<Config&>(c))); };
  return k;
}

// A path, a glob, or a list of them (data.train / data.val); ~ or "" = none.
Key PathListKey(std::string section, std::string key, std::string desc,
                std::function<std::vector<std::string>&(Config&)> field) {
  Key k{section, key, "a path, a glob, or a list of them", std::move(desc), nullptr, nullptr};
  std::string name = k.full();
  k.parse = [=](const YAML::Node& n, const Origin& o, Config& c) {
    std::vector<std::string> v;
    if (n.IsSequence()) {
      for (std::size_t i = 0; i < n.size(); ++i) {
        std::string s = AsString(n[i], o, fmt::format("{}[{}]", name, i));
        if (!s.empty()) v.push_back(std::move(s));
      }
    } else {
      std::string s = AsString(n, o, name);
      if (!s.empty()) v.push_back(std::move(s));
    }
    field(c) = std::move(v);
  };
  k.dump = [=](const Config& c) {
    const std::vector<std::string>& v = field(const_cast<Config&>(c));
    if (v.size() == 1) return YAML::Node(v[0]);
    if (v.empty()) return YAML::Node("");
    YAML::Node l(YAML::NodeType::Sequence);
    for (const std::string& p : v) l.push_back(p);
    return l;
  };
  return k;
}

// A list of names (train.lora.target_modules): a YAML list, or one string of names separated by
// commas ("q_proj,v_proj", handy in --set); "" or [] = none. Dumped as a flow list.
Key StringListKey(std::string section, std::string key, std::string desc,
                  std::function<std::vector<std::string>&(Config&)> field) {
  Key k{section, key, "a list of names", std::move(desc), nullptr, nullptr};
  std::string name = k.full();
  k.parse = [=](const YAML::Node& n, const Origin& o, Config& c) {
    std::vector<std::string> v;
    auto add = [&](const std::string& s) {
      std::size_t b = 0;
      while (b <= s.size()) {
        std::size_t e = s.find(',', b);
        if (e == std::string::npos) e = s.size();
        std::string item = s.substr(b, e - b);
        item.erase(0, item.find_first_not_of(' '));
        item.erase(item.find_last_not_of(' ') + 1);
        if (!item.empty()) v.push_back(item);
        b = e + 1;
      }
    };
    if (n.IsSequence()) {
      for (std::size_t i = 0; i < n.size(); ++i)
        add(AsString(n[i], o, fmt::format("{}[{}]", name, i)));
    } else if (!n.IsNull()) {
      add(AsString(n, o, name));
    }
    field(c) = std::move(v);
  };
  k.dump = [=](const Config& c) {
    YAML::Node l(YAML::NodeType::Sequence);
    for (const std::string& p : field(const_cast<Config&>(c))) l.push_back(p);
    l.SetStyle(YAML::EmitterStyle::Flow);
    return l;
  };
  return k;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

// placement.*: how the machine is cut into replica groups.
void AddPlacementKeys(std::vector<Key>& v) {
  // ---- placement
  {
    Key k{"placement",
          "group_by",
          "one of socket, numa, l3",
          "one replica group per package (socket), NUMA node or L3 cache",
          nullptr,
          nullptr};
    k.parse = [](const YAML::Node& n, const Origin& o, Config& c) {
      std::string s = AsChoice(n, o, "placement.group_by", {"socket", "numa", "l3"});
      c.placement.group_by = s == "socket" ? topo::GroupBy::kSocket
                             : s == "numa" ? topo::GroupBy::kNuma
                                           : topo::GroupBy::kL3;
    };
    k.dump = [](const Config& c) { return YAML::Node(topo::GroupByName(c.placement.group_by)); };
    v.push_back(k);
  }
  // on_set/on_unset/is_unset track "the config named this key" for keys where being unset
  // differs from auto (threads_per_group: unset lets OMP_NUM_THREADS decide).
  auto auto_int = [](std::string key, std::string desc,
                     std::function<std::optional<int>&(Config&)> field,
                     std::function<void(Config&)> on_set, std::function<void(Config&)> on_unset,
                     std::function<bool(const Config&)> is_unset) {
    Key k{"placement", key, "auto or an integer >= 1", std::move(desc), nullptr, nullptr};
    std::string name = k.full();
    k.parse = [=](const YAML::Node& n, const Origin& o, Config& c) {
      if (n.IsNull() && on_unset) {  // "~": back to not set
        field(c) = std::nullopt;
        on_unset(c);
        return;
      }
      if (n.IsScalar() && n.Scalar() == "auto") {
        field(c) = std::nullopt;
      } else {
        field(c) = static_cast<int>(AsInteger(n, o, name, "auto or an integer >= 1", 1, kIntMax));
      }
      if (on_set) on_set(c);
    };
    k.dump = [=](const Config& c) {
      if (is_unset && is_unset(c)) return YAML::Node(YAML::NodeType::Null);
      auto f = field(const_cast<Config&>(c));
      return f ? YAML::Node(*f) : YAML::Node("auto");
    };
    return k;
  };
  v.push_back(auto_int(
      "groups", "number of replica groups: the first N domains (auto = all)",
      [](Config& c) -> std::optional<int>& { return c.placement.groups; }, nullptr, nullptr,
      nullptr));
  v.push_back(auto_int(
      "threads_per_group",
      "worker threads per group; auto = one per physical core (or hardware thread with "
      "hyperthreads); ~ (not set) = OMP_NUM_THREADS if that is set, else auto",
      [](Config& c) -> std::optional<int>& { return c.placement.threads_per_group; },
      [](Config& c) { c.placement.threads_per_group_set = true; },
      [](Config& c) { c.placement.threads_per_group_set = false; },
      [](const Config& c) { return !c.placement.threads_per_group_set; }));
  v.push_back(BoolKey("placement", "hyperthreads",
                      "also use SMT siblings (one worker per hardware thread)",
                      [](Config& c) -> bool& { return c.placement.hyperthreads; }));
  v.push_back(IntKey("placement", "comm_threads",
                     "cores per group kept out of the compute budget for communication "
                     "threads (like CCL_WORKER_COUNT)",
                     0, [](Config& c) -> int& { return c.placement.comm_threads; }));
  {
    Key k{"placement",
          "cpus",
          "a list of lists of OS CPU numbers",
          "explicit CPUs per group, e.g. [[0,1,2,3],[4,5,6,7]]; overrides the keys above "
          "(the last comm_threads CPUs of each list become comm CPUs)",
          nullptr,
          nullptr};
    k.parse = [](const YAML::Node& n, const Origin& o, Config& c) {
      const std::string type = "a list of lists of CPU numbers, e.g. [[0,1],[2,3]]";
      if (n.IsNull()) {
        c.placement.cpus.clear();
        return;
      }
      if (!n.IsSequence()) Bad(o, "placement.cpus", type, n);
      std::vector<std::vector<int>> lists;
      for (std::size_t i = 0; i < n.size(); ++i) {
        const YAML::Node g = n[i];
        if (!g.IsSequence()) Bad(o, fmt::format("placement.cpus[{}]", i), type, g);
        std::vector<int> cpus;
        for (std::size_t j = 0; j < g.size(); ++j) {
          cpus.push_back(
              static_cast<int>(AsInteger(g[j], o, fmt::format("placement.cpus[{}][{}]", i, j),
                                         "a CPU number >= 0", 0, kIntMax)));
        }
        lists.push_back(std::move(cpus));
      }
      c.placement.cpus = std::move(lists);
    };
    k.dump = [](const Config& c) {
      YAML::Node n(YAML::NodeType::Sequence);
      for (const auto& g : c.placement.cpus) {
        YAML::Node l(YAML::NodeType::Sequence);
        for (int cpu : g) l.push_back(cpu);
        l.SetStyle(YAML::EmitterStyle::Flow);
        n.push_back(l);
      }
      n.SetStyle(YAML::EmitterStyle::Flow);
      return n;
    };
    v.push_back(k);
  }
}

// model.*: family, shape and initialisation.
// model.rope_scaling and its factors (model::RopeScaling's kinds: Llama 3.1's and Gemma 3's
// linear), for a random init; a Hugging Face directory brings its own.
void AddRopeScalingKeys(std::vector<Key>& v) {
  {
    Key k{"model",
          "rope_scaling",
          "one of none, llama3, linear",
          "rotary frequency scaling: none, llama3 (Llama 3.1+; the four rope_* keys below) or "
          "linear (positions divided by rope_factor: Gemma 3)",
          nullptr,
          nullptr};
    k.parse = [](const YAML::Node& n, const Origin& o, Config& c) {
      c.model.rope_scaling = AsChoice(n, o, "model.rope_scaling", {"none", "llama3", "linear"});
    };
    k.dump = [](const Config& c) { return YAML::Node(c.model.rope_scaling); };
    v.push_back(k);
  }
  v.push_back(NumberKey("model", "rope_factor",
                        "llama3 scaling: the low frequencies' divisor; linear: the positions'", 1,
                        1e6, [](Config& c) -> double& { return c.model.rope_factor; }));
  v.push_back(NumberKey("model", "rope_low_freq_factor", "llama3 scaling: low_freq_factor", 1e-6,
                        1e6, [](Config& c) -> double& { return c.model.rope_low_freq_factor; }));
  v.push_back(NumberKey("model", "rope_high_freq_factor", "llama3 scaling: high_freq_factor", 1e-6,
                        1e6, [](Config& c) -> double& { return c.model.rope_high_freq_factor; }));
  v.push_back(IntKey(
      "model", "rope_original_max_position", "llama3 scaling: original_max_position_embeddings", 1,
      [](Config& c) -> int& { return c.model.rope_original_max_position; }, model::kMaxSeqLen));
}

void AddModelKeys(std::vector<Key>& v) {
  // ---- model
  v.push_back(
      StringKey("model", "init_from",
                "checkpoint to start from (a model.bin, a checkpoint directory, a run's "
                "out_dir, or a Hugging Face model directory of a family `train --help` lists); "
                "empty = random init "
                "from seed (the checkpoint gives the family and shape; a layers..max_seq_len "
                "you set that disagrees is an error)",
                [](Config& c) -> std::string& { return c.model.init_from; }));
  v.push_back(StringKey("model", "preset",
                        "a named shape for a random init (bench's presets: qwen3-0.6b, "
                        "gemma3-270m, ...; docs/config.md): its family and every dimension, "
                        "model.max_seq_len still the positions; \"\" = the keys below",
                        [](Config& c) -> std::string& { return c.model.preset; }));
  v.push_back(StringKey("model", "arch",
                        "model family of a random init (docs/config.md lists them; a family "
                        "name the engine does not know is refused when training starts)",
                        [](Config& c) -> std::string& { return c.model.arch; }));
  v.push_back(StringKey("model", "head",
                        "what the model computes: lm (the decoder families), qa (the encoder "
                        "families: extractive question answering, as `qa train` sets) or "
                        "classify (sequence classification, as `classify train` sets)",
                        [](Config& c) -> std::string& { return c.model.head; }));
  v.push_back(IntKey(
      "model", "num_labels",
      "a classifier's outputs (its labels; 1 for a regression); 0 = the checkpoint's", 0,
      [](Config& c) -> int& { return c.model.num_labels; }, model::kMaxLabels));
  v.push_back(IntKey(
      "model", "pad_token_id",
      "a decoder classifier's padding token where its config.json names none; -1 = none", -1,
      [](Config& c) -> int& { return c.model.pad_token_id; }, model::kMaxVocab));
  v.push_back(StringKey("model", "problem_type",
                        "a classifier's loss: single_label_classification, regression or "
                        "multi_label_classification; empty = the checkpoint's",
                        [](Config& c) -> std::string& { return c.model.problem_type; }));
  v.push_back(IntKey(
      "model", "token_types", "token types of a random bert init (type_vocab_size)", 1,
      [](Config& c) -> int& { return c.model.token_types; }, model::kMaxTypes));
  v.push_back(NumberKey("model", "hidden_dropout",
                        "dropout of a random bert/distilbert init's hidden states "
                        "(a Hugging Face directory's config.json gives its own)",
                        0, 0.999, [](Config& c) -> double& { return c.model.hidden_dropout; }));
  v.push_back(NumberKey("model", "attention_dropout",
                        "dropout of a random bert/distilbert init's attention probabilities", 0,
                        0.999, [](Config& c) -> double& { return c.model.attention_dropout; }));
  v.push_back(IntKey(
      "model", "layers", "transformer blocks L", 1,
      [](Config& c) -> int& { return c.model.layers; }, model::kMaxLayers));
  v.push_back(IntKey(
      "model", "channels", "embedding width C", 1,
      [](Config& c) -> int& { return c.model.channels; }, model::kMaxChannels));
  v.push_back(IntKey(
      "model", "heads", "attention heads NH (must divide channels)", 1,
      [](Config& c) -> int& { return c.model.heads; }, model::kMaxChannels));
  v.push_back(IntKey(
      "model", "kv_heads", "key/value heads NKV of grouped-query attention (0: heads)", 0,
      [](Config& c) -> int& { return c.model.kv_heads; }, model::kMaxChannels));
  v.push_back(IntKey(
      "model", "ffn_hidden", "the MLP's hidden width (0: the family's, 4 * channels)", 0,
      [](Config& c) -> int& { return c.model.ffn_hidden; }, 4 * model::kMaxChannels));
  v.push_back(IntKey(
      "model", "head_dim",
      "the attention heads' size (0: channels / heads; qwen3, gemma3 set "
      "their own)",
      0, [](Config& c) -> int& { return c.model.head_dim; }, model::kMaxChannels));
  v.push_back(IntKey(
      "model", "vocab_size", "vocabulary V (256 for the bytes tokenizer, 50257 for gpt2)", 1,
      [](Config& c) -> int& { return c.model.vocab_size; }, model::kMaxVocab));
  v.push_back(NumberKey("model", "norm_eps", "epsilon of the norms (llama: RMSNorm's)", 1e-12, 1,
                        [](Config& c) -> double& { return c.model.norm_eps; }));
  v.push_back(NumberKey("model", "rope_theta", "base of the rotary embeddings (llama)", 1, 1e12,
                        [](Config& c) -> double& { return c.model.rope_theta; }));
  AddRopeScalingKeys(v);
  v.push_back(BoolKey("model", "tied_embeddings",
                      "the LM head is the token embedding (llama; gpt2 is always tied)",
                      [](Config& c) -> bool& { return c.model.tied_embeddings; }));
  v.push_back(IntKey(
      "model", "max_seq_len", "positions maxT of the position embedding", 1,
      [](Config& c) -> int& { return c.model.max_seq_len; }, model::kMaxSeqLen));
  {
    Key k{"model", "seed", "an integer >= 0", "seed of the random init", nullptr, nullptr};
    k.parse = [](const YAML::Node& n, const Origin& o, Config& c) {
      c.model.seed = static_cast<uint64_t>(AsInteger(n, o, "model.seed", "an integer >= 0", 0,
                                                     std::numeric_limits<long long>::max()));
    };
    k.dump = [](const Config& c) { return YAML::Node(c.model.seed); };
    v.push_back(k);
  }
}

// data.*: the token files.
void AddDataKeys(std::vector<Key>& v) {
  // ---- data
  v.push_back(PathListKey("data", "train",
                          "llm.c token files to train on: shards, in sorted path order",
                          [](Config& c) -> std::vector<std::string>& { return c.data.train; }));
  v.push_back(PathListKey("data", "val",
                          "llm.c token files for validation (never shuffled); empty = none",
                          [](Config& c) -> std::vector<std::string>& { return c.data.val; }));
  v.push_back(IntKey("data", "batch_size",
                     "B: global sequences per step, split across nodes and groups", 1,
                     [](Config& c) -> int& { return c.data.batch_size; }));
  v.push_back(IntKey(
      "data", "seq_len", "T: tokens per sequence (<= model.max_seq_len)", 1,
      [](Config& c) -> int& { return c.data.seq_len; }, model::kMaxSeqLen));
  v.push_back(
      BoolKey("data", "shuffle",
              "a new seeded permutation of the train windows every epoch (false: in file order)",
              [](Config& c) -> bool& { return c.data.shuffle; }));
  {
    Key k{"data",  "seed", "an integer >= 0, or ~ (model.seed)", "seed of the shuffle",
          nullptr, nullptr};
    k.parse = [](const YAML::Node& n, const Origin& o, Config& c) {
      if (n.IsNull()) {
        c.data.seed.reset();
        return;
      }
      c.data.seed = static_cast<uint64_t>(AsInteger(n, o, "data.seed", "an integer >= 0", 0,
                                                    std::numeric_limits<long long>::max()));
    };
    k.dump = [](const Config& c) {
      return c.data.seed ? YAML::Node(*c.data.seed) : YAML::Node(YAML::NodeType::Null);
    };
    v.push_back(k);
  }
}

// optim.*: AdamW and the schedule.
void AddOptimKeys(std::vector<Key>& v) {
  // ---- optim
  v.push_back(NumberKey("optim", "lr", "peak learning rate", 0, kInf,
                        [](Config& c) -> double& { return c.optim.lr; }));
  v.push_back(NumberKey("optim", "min_lr", "final learning rate of the cosine schedule", 0, kInf,
                        [](Config& c) -> double& { return c.optim.min_lr; }));
  {
    Key k{"optim",
          "schedule",
          "one of constant, cosine, linear",
          "constant lr; linear warmup then cosine decay to min_lr at train.steps; or Hugging "
          "Face's linear schedule (warmup from 0, then linear decay to 0 at train.steps)",
          nullptr,
          nullptr};
    k.parse = [](const YAML::Node& n, const Origin& o, Config& c) {
      const std::string v = AsChoice(n, o, "optim.schedule", {"constant", "cosine", "linear"});
      c.optim.schedule = v == "constant" ? Schedule::kConstant
                         : v == "linear" ? Schedule::kLinear
                                         : Schedule::kCosine;
    };
    k.dump = [](const Config& c) { return YAML::Node(ScheduleName(c.optim.schedule)); };
    v.push_back(k);
  }
  v.push_back(IntKey("optim", "warmup_steps", "warmup steps of the cosine and linear schedules", 0,
                     [](Config& c) -> int& { return c.optim.warmup_steps; }));
  v.push_back(NumberKey("optim", "beta1", "AdamW first-moment decay", 0, 1,
                        [](Config& c) -> double& { return c.optim.beta1; }));
  v.push_back(NumberKey("optim", "beta2", "AdamW second-moment decay", 0, 1,
                        [](Config& c) -> double& { return c.optim.beta2; }));
  v.push_back(NumberKey("optim", "eps", "AdamW epsilon", 0, kInf,
                        [](Config& c) -> double& { return c.optim.eps; }));
  v.push_back(NumberKey("optim", "weight_decay",
                        "weight decay of the 2-D tensors only (decoupled for AdamW and Adafactor; "
                        "SGD adds it to the gradient, as torch does)",
                        0, kInf, [](Config& c) -> double& { return c.optim.weight_decay; }));
  v.push_back(NumberKey("optim", "grad_clip", "global gradient-norm clip; 0 = off", 0, kInf,
                        [](Config& c) -> double& { return c.optim.grad_clip; }));
}

// optim.name and the settings of the optimizers beside AdamW (optim/optimizer.h).
void AddOptimizerKeys(std::vector<Key>& v) {
  {
    const std::vector<std::string> names(std::begin(kOptimizerNames), std::end(kOptimizerNames));
    Key k{"optim",
          "name",
          fmt::format("one of {}", fmt::join(names, ", ")),
          "the optimizer: torch.optim.AdamW (beta1, beta2, eps), transformers' Adafactor "
          "(optim.adafactor.*) or torch.optim.SGD (momentum, dampening, nesterov); each takes "
          "optim.weight_decay, the schedule and the clip",
          nullptr,
          nullptr};
    k.parse = [names](const YAML::Node& n, const Origin& o, Config& c) {
      c.optim.name = AsChoice(n, o, "optim.name", names);
    };
    k.dump = [](const Config& c) { return YAML::Node(c.optim.name); };
    v.push_back(k);
  }
  v.push_back(NumberKey("optim", "momentum", "SGD momentum (0: plain SGD, no state)", 0, 1,
                        [](Config& c) -> double& { return c.optim.momentum; }));
  v.push_back(NumberKey("optim", "dampening", "SGD dampening of the momentum", 0, 1,
                        [](Config& c) -> double& { return c.optim.dampening; }));
  v.push_back(BoolKey("optim", "nesterov", "SGD with Nesterov momentum",
                      [](Config& c) -> bool& { return c.optim.nesterov; }));
  v.push_back(BoolKey("optim", "adafactor.scale_parameter",
                      "Adafactor: lr times max(eps2, RMS of the tensor)",
                      [](Config& c) -> bool& { return c.optim.adafactor.scale_parameter; }));
  v.push_back(BoolKey("optim", "adafactor.relative_step",
                      "Adafactor: lr = min(1e-2, 1/sqrt(step)) instead of the schedule's",
                      [](Config& c) -> bool& { return c.optim.adafactor.relative_step; }));
  v.push_back(BoolKey("optim", "adafactor.warmup_init",
                      "Adafactor: the relative step min(1e-6 step, 1/sqrt(step))",
                      [](Config& c) -> bool& { return c.optim.adafactor.warmup_init; }));
  v.push_back(NumberKey("optim", "adafactor.decay_rate",
                        "Adafactor: second-moment decay 1 - step^decay_rate", -1, 0,
                        [](Config& c) -> double& { return c.optim.adafactor.decay_rate; }));
  v.push_back(NumberKey("optim", "adafactor.clip_threshold",
                        "Adafactor: the update's RMS clipped to it, per tensor", 1e-9, kInf,
                        [](Config& c) -> double& { return c.optim.adafactor.clip_threshold; }));
  v.push_back(NumberKey("optim", "adafactor.beta1",
                        "Adafactor: first-moment decay; 0 = no first moment (transformers' None)",
                        0, 0.999999, [](Config& c) -> double& { return c.optim.adafactor.beta1; }));
  v.push_back(NumberKey("optim", "adafactor.eps1", "Adafactor: added to the squared gradient", 0, 1,
                        [](Config& c) -> double& { return c.optim.adafactor.eps1; }));
  v.push_back(NumberKey("optim", "adafactor.eps2", "Adafactor: the least parameter scale", 0, 1,
                        [](Config& c) -> double& { return c.optim.adafactor.eps2; }));
}

// train.*: the run.
void AddTrainKeys(std::vector<Key>& v) {
  // ---- train
  v.push_back(IntKey("train", "steps", "optimizer steps to run", 1,
                     [](Config& c) -> int& { return c.train.steps; }));
  v.push_back(IntKey("train", "grad_accum_steps",
                     "micro-batches per optimizer step (gradient accumulation); the sync runs "
                     "once per step",
                     1, [](Config& c) -> int& { return c.train.grad_accum_steps; }));
  {
    Key k{"train",
          "batch_tokens",
          "an integer >= 0",
          "global batch in tokens per optimizer step, a multiple of batch_size*seq_len (sets "
          "grad_accum_steps); 0 = batch_size*seq_len*grad_accum_steps",
          nullptr,
          nullptr};
    k.parse = [](const YAML::Node& n, const Origin& o, Config& c) {
      c.train.batch_tokens = AsInteger(n, o, "train.batch_tokens", "an integer >= 0", 0,
                                       std::numeric_limits<long long>::max());
    };
    k.dump = [](const Config& c) { return YAML::Node(c.train.batch_tokens); };
    v.push_back(k);
  }
  v.push_back(IntKey("train", "eval_every",
                     "validate every N steps (and after the last); 0 = only after the last", 0,
                     [](Config& c) -> int& { return c.train.eval_every; }));
  v.push_back(IntKey("train", "eval_batches", "validation windows averaged per evaluation", 1,
                     [](Config& c) -> int& { return c.train.eval_batches; }));
  v.push_back(IntKey("train", "checkpoint_every",
                     "save a checkpoint every N steps; 0 = only at the end", 0,
                     [](Config& c) -> int& { return c.train.checkpoint_every; }));
  v.push_back(StringKey("train", "out_dir",
                        "directory for metrics.jsonl, checkpoints/, placement.json",
                        [](Config& c) -> std::string& { return c.train.out_dir; }));
  v.push_back(StringKey("train", "resume",
                        "auto (continue from out_dir's newest checkpoint), never (refuse an "
                        "out_dir holding a run) or a checkpoint path",
                        [](Config& c) -> std::string& { return c.train.resume; }));
  v.push_back(BoolKey("train", "resume_fallback",
                      "a resume whose newest checkpoint is damaged or incomplete (checksum "
                      "mismatch, state.bin missing): false refuses it (exit 2 naming the file), "
                      "true skips it, saying which and why, for the newest good one (also: "
                      "train --resume-fallback)",
                      [](Config& c) -> bool& { return c.train.resume_fallback; }));
  v.push_back(BoolKey("train", "gradient_checkpointing",
                      "keep only each block's input and recompute the block in the backward "
                      "(Hugging Face's gradient_checkpointing): the activations of one layer "
                      "instead of all of them, for about a third more compute; gradients "
                      "bit-identical (docs/memory-plan.md)",
                      [](Config& c) -> bool& { return c.train.gradient_checkpointing; }));
  v.push_back(IntKey("train", "keep_checkpoints",
                     "newest checkpoint directories kept in out_dir/checkpoints; 0 = all", 0,
                     [](Config& c) -> int& { return c.train.keep_checkpoints; }));
  {
    Key k = StringListKey(
        "train", "report_to",
        "where the run's metrics also go, as Hugging Face's report_to: none, or tensorboard "
        "(an event file in out_dir/runs; all means the same); trainer_state.json is always "
        "written (docs/formats.md)",
        [](Config& c) -> std::vector<std::string>& { return c.train.report_to; });
    k.type = "a list of: none, tensorboard, all";
    // An entry this engine does not report to is named (a list used to be refused as "not a
    // list", issue 43): Hugging Face's wandb, mlflow, ... have no writer here.
    k.parse = [list = k.parse](const YAML::Node& n, const Origin& o, Config& c) {
      list(n, o, c);
      for (const std::string& s : c.train.report_to) {
        if (s == "none" || s == "tensorboard" || s == "all") continue;
        throw InputError(fmt::format("{}: train.report_to names '{}', which is not supported: "
                                     "cputrain-numa reports to none, tensorboard or all (= "
                                     "tensorboard)",
                                     o.where, s),
                         "drop it, or use tensorboard (an event file in out_dir/runs); "
                         "metrics.jsonl and trainer_state.json are always written");
      }
    };
    v.push_back(k);
  }
  {
    Key k{"train",
          "on_nonfinite",
          "one of stop, skip_step",
          "a non-finite loss or gradient norm: stop (exit 1, last checkpoint kept) or skip the "
          "step's update",
          nullptr,
          nullptr};
    k.parse = [](const YAML::Node& n, const Origin& o, Config& c) {
      c.train.skip_nonfinite =
          AsChoice(n, o, "train.on_nonfinite", {"stop", "skip_step"}) == "skip_step";
    };
    k.dump = [](const Config& c) {
      return YAML::Node(c.train.skip_nonfinite ? "skip_step" : "stop");
    };
    v.push_back(k);
  }
  {
    Key k{"train",
          "precision",
          "one of fp32, bf16",
          "fp32, or bf16 mixed precision as torch.autocast: the matrix products (linear "
          "layers, LM head, attention) in bf16 with fp32 accumulation, the rest and the master "
          "weights fp32 (needs AVX512_BF16 or AMX; docs/bf16.md)",
          nullptr,
          nullptr};
    k.parse = [](const YAML::Node& n, const Origin& o, Config& c) {
      c.train.bf16 = AsChoice(n, o, "train.precision", {"fp32", "bf16"}) == "bf16";
    };
    k.dump = [](const Config& c) { return YAML::Node(c.train.bf16 ? "bf16" : "fp32"); };
    v.push_back(k);
  }
}

// train.bf16_kernel, train.fp32_kernel: which kernels run the products (kernels/bf16.h,
// kernels/kernels.h); a string field holding one of `choices`.
Key KernelKey(std::string key, std::vector<std::string> choices, std::string desc,
              std::function<std::string&(Config&)> field) {
  Key k{"train",         key,     "one of " + fmt::format("{}", fmt::join(choices, ", ")),
        std::move(desc), nullptr, nullptr};
  const std::string name = k.full();
  k.parse = [=](const YAML::Node& n, const Origin& o, Config& c) {
    field(c) = AsChoice(n, o, name, choices);
  };
  k.dump = [=](const Config& c) { return YAML::Node(field(const_cast<Config&>(c))); };
  return k;
}
void AddKernelKeys(std::vector<Key>& v) {
  v.push_back(KernelKey(
      "bf16_kernel", {"auto", "amx", "vdpbf16ps", "tile-model", "onednn"},
      "which kernel runs train.precision: bf16's products: auto (each class of products on the "
      "kernel measured fastest here among ours on AMX where the CPU has it and Linux grants it, "
      "ours on VDPBF16PS and oneDNN: docs/kernels.md), or one forced: amx, vdpbf16ps, tile-model "
      "(our AMX kernel on a portable model of the tiles: any CPU, slow; for tests) or onednn "
      "(builds with oneDNN); the environment's CPUTRAIN_BF16_KERNEL overrides auto "
      "(docs/bf16.md)",
      [](Config& c) -> std::string& { return c.train.bf16_kernel; }));
  v.push_back(KernelKey(
      "fp32_kernel", {"auto", "openblas", "onednn", "own"},
      "which kernel runs the fp32 matrix products (fp32 training, and LoRA's adapters in "
      "either precision): auto (each class of products on the kernel measured fastest here, "
      "cached per machine: docs/kernels.md), or for every class openblas, onednn (builds with "
      "oneDNN) or own (our AVX2 + FMA kernel); the environment's CPUTRAIN_FP32_KERNEL overrides "
      "auto",
      [](Config& c) -> std::string& { return c.train.fp32_kernel; }));
}

// train.lora.*: the adapters.
void AddLoraKeys(std::vector<Key>& v) {
  // ---- train.lora (nested under train; "lora.r" is the key, so --set train.lora.r=16)
  v.push_back(IntKey(
      "train", "lora.r",
      "LoRA rank: train low-rank adapters over a frozen base instead of every "
      "weight (docs/lora.md); 0 = off (full fine-tuning)",
      0, [](Config& c) -> int& { return c.train.lora.r; }, 4096));
  v.push_back(NumberKey("train", "lora.alpha",
                        "LoRA scale numerator: the update is (alpha / r) B A x (PEFT's "
                        "lora_alpha)",
                        1e-6, 1e6, [](Config& c) -> double& { return c.train.lora.alpha; }));
  v.push_back(NumberKey("train", "lora.dropout",
                        "dropout of the adapters' input while training (PEFT's lora_dropout)", 0,
                        0.999, [](Config& c) -> double& { return c.train.lora.dropout; }));
  v.push_back(StringListKey(
      "train", "lora.target_modules",
      "modules to adapt, named as PEFT names them (q_proj, v_proj, ...; "
      "all-linear: every linear layer of the blocks); empty = the "
      "family's PEFT default",
      [](Config& c) -> std::vector<std::string>& { return c.train.lora.target_modules; }));
  v.push_back(StringListKey(
      "train", "lora.modules_to_save",
      "base modules that train fully beside the adapters (e.g. lm_head; a "
      "QA model's qa_outputs always does)",
      [](Config& c) -> std::vector<std::string>& { return c.train.lora.modules_to_save; }));
  {
    Key k{"train",
          "lora.init",
          "one of default, gaussian, false",
          "adapter init as PEFT's init_lora_weights: default (A Kaiming-uniform, B zero), "
          "gaussian (A normal(0, 1/r), B zero), false (B random too)",
          nullptr,
          nullptr};
    k.parse = [](const YAML::Node& n, const Origin& o, Config& c) {
      c.train.lora.init = AsChoice(n, o, "train.lora.init", {"default", "gaussian", "false"});
    };
    k.dump = [](const Config& c) { return YAML::Node(c.train.lora.init); };
    v.push_back(k);
  }
  {
    Key k{"train",
          "lora.base_dtype",
          "one of fp32, bf16",
          "storage of the frozen base weights, once per NUMA node: fp32, or bf16 (half the "
          "memory; needs train.precision: bf16)",
          nullptr,
          nullptr};
    k.parse = [](const YAML::Node& n, const Origin& o, Config& c) {
      c.train.lora.base_dtype = AsChoice(n, o, "train.lora.base_dtype", {"fp32", "bf16"});
    };
    k.dump = [](const Config& c) { return YAML::Node(c.train.lora.base_dtype); };
    v.push_back(k);
  }
  v.push_back(StringKey("train", "lora.adapter",
                        "a PEFT adapter directory to continue training (its "
                        "adapter_config.json sets r, alpha, dropout and the modules); also "
                        "train --adapter",
                        [](Config& c) -> std::string& { return c.train.lora.adapter; }));
}

// comm.* and mpi.*: gradient sync within and across machines.
void AddCommMpiKeys(std::vector<Key>& v) {
  // ---- comm
  v.push_back(NumberKey("comm", "bucket_mb",
                        "gradient bucket size in MB (10^6 bytes) synced while backward runs", 0.001,
                        kInf, [](Config& c) -> double& { return c.comm.bucket_mb; }));
  // ---- mpi
  {
    Key k{"mpi",
          "enabled",
          "one of auto, on, off",
          "multi-node bridge; auto = on when launched by mpirun",
          nullptr,
          nullptr};
    k.parse = [](const YAML::Node& n, const Origin& o, Config& c) {
      // YAML 1.1 reads on/off as booleans; accept both spellings.
      bool b;
      if (n.IsScalar() && n.Scalar() != "auto" && YAML::convert<bool>::decode(n, b)) {
        c.mpi.enabled = b ? MpiMode::kOn : MpiMode::kOff;
        return;
      }
      std::string s = AsChoice(n, o, "mpi.enabled", {"auto", "on", "off"});
      c.mpi.enabled = s == "auto" ? MpiMode::kAuto : s == "on" ? MpiMode::kOn : MpiMode::kOff;
    };
    k.dump = [](const Config& c) { return YAML::Node(MpiModeName(c.mpi.enabled)); };
    v.push_back(k);
  }
  v.push_back(NumberKey("mpi", "watchdog_seconds",
                        "a peer rank silent this long makes every rank exit with an error", 1, kInf,
                        [](Config& c) -> double& { return c.mpi.watchdog_seconds; }));
}

const std::vector<Key>& Keys() {
  static const std::vector<Key> keys = [] {
    std::vector<Key> v;
    v.push_back(StringKey("", "topology",
                          "machine to plan on: this | synthetic:<hwloc description> | xml:<file>",
                          [](Config& c) -> std::string& { return c.topology; }));
    AddPlacementKeys(v);
    AddModelKeys(v);
    AddDataKeys(v);
    AddOptimKeys(v);
    AddOptimizerKeys(v);
    AddTrainKeys(v);
    AddKernelKeys(v);
    AddLoraKeys(v);
    AddCommMpiKeys(v);
    return v;
  }();
  return keys;
}

const Key* FindKey(const std::string& section, const std::string& key) {
  for (const Key& k : Keys()) {
    if (k.section == section && k.key == key) return &k;
  }
  return nullptr;
}

std::vector<std::string> Sections() {
  std::vector<std::string> s;
  for (const Key& k : Keys()) {
    std::string name = k.section.empty() ? k.key : k.section;
    if (std::find(s.begin(), s.end(), name) == s.end()) s.push_back(name);
  }
  return s;
}

std::string Suggest(const std::string& got, const std::vector<std::string>& valid) {
  const std::string best = ClosestWord(got, valid);
  return best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best);
}

std::string JoinList(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

std::string At(const std::string& name, const YAML::Mark& m) {
  return m.is_null() ? name : fmt::format("{}:{}", name, m.line + 1);
}

[[noreturn]] void UnknownKey(const std::string& where, const std::string& section,
                             const std::string& key) {
  if (section.empty()) {
    std::vector<std::string> secs = Sections();
    throw InputError(fmt::format("{}: unknown top-level key '{}'{}; valid keys: {}", where, key,
                                 Suggest(key, secs), JoinList(secs)),
                     "fix the key name; docs/config.md lists every key");
  }
  std::vector<std::string> valid;
  for (const Key& k : Keys())
    if (k.section == section) valid.push_back(k.key);
  throw InputError(fmt::format("{}: unknown key '{}' in section '{}'{}; valid keys: {}", where, key,
                               section, Suggest(key, valid), JoinList(valid)),
                   "fix the key name; docs/config.md lists every key");
}

// The name of a mapping key. YAML also allows a sequence, a mapping or null as a key ("? [a]"),
// whose as<std::string>() would throw yaml-cpp's exception past the config's InputError.
std::string KeyName(const YAML::Node& key, const std::string& name) {
  if (!key.IsScalar()) {
    throw InputError(
        fmt::format("{}: a key must be a name, not {}", At(name, key.Mark()), Show(key)),
        "write keys as plain names, e.g. 'model:' and 'layers: 12'");
  }
  return key.Scalar();
}

// yaml-cpp keeps every pair of a mapping, so a repeated key would be applied twice and the last
// one would silently win; the config is strict, so a repeat is an error naming both lines.
void CheckNoDuplicateKeys(const YAML::Node& map, const std::string& name,
                          const std::string& section) {
  std::map<std::string, YAML::Mark> seen;
  for (const auto& kv : map) {
    const std::string key = KeyName(kv.first, name);
    auto [it, fresh] = seen.emplace(key, kv.first.Mark());
    if (!fresh) {
      const std::string full = section.empty() ? key : section + "." + key;
      throw InputError(fmt::format("{}: duplicate key '{}' (first set at {})",
                                   At(name, kv.first.Mark()), full, At(name, it->second)),
                       "keep one of them: the config does not let a later key override an "
                       "earlier one");
    }
  }
}

// Applies the keys of a section's mapping; a key that is a group of keys ("lora" of train's
// "lora.r", ...) holds a nested mapping of them (or they are written out flat, "lora.r: 16").
void ApplySection(const YAML::Node& map, const std::string& name, const std::string& sec,
                  const std::string& group, Config& c) {
  CheckNoDuplicateKeys(map, name, group.empty() ? sec : sec + "." + group);
  for (const auto& kv2 : map) {
    const std::string key = group + KeyName(kv2.first, name);
    const Key* k = FindKey(sec, key);
    if (!k) {
      const bool is_group = std::any_of(Keys().begin(), Keys().end(), [&](const Key& x) {
        return x.section == sec && x.key.rfind(key + ".", 0) == 0;
      });
      if (is_group && kv2.second.IsMap()) {
        ApplySection(kv2.second, name, sec, key + ".", c);
        continue;
      }
      if (is_group && !kv2.second.IsNull()) {
        throw InputError(fmt::format("{}: '{}.{}' must be a mapping of keys, not {}",
                                     At(name, kv2.second.Mark()), sec, key, Show(kv2.second)),
                         fmt::format("indent its keys under it, e.g. '{}:\\n  r: 16'", key));
      }
      if (is_group) continue;
      UnknownKey(At(name, kv2.first.Mark()), sec, key);
    }
    k->parse(kv2.second, Origin{At(name, kv2.second.Mark())}, c);
    c.explicit_keys[sec + "." + key] = At(name, kv2.first.Mark());
  }
}

// Applies one YAML document (a mapping of sections) to `c`.
void ApplyDocument(const YAML::Node& root, const std::string& name, Config& c) {
  if (root.IsNull()) return;  // an empty file: all defaults
  if (!root.IsMap()) {
    throw InputError(fmt::format("{}: the config must be a mapping of sections (placement:, "
                                 "model:, ...), not {}",
                                 At(name, root.Mark()), Show(root)),
                     "see configs/ for examples");
  }
  CheckNoDuplicateKeys(root, name, "");
  for (const auto& kv : root) {
    const std::string sec = KeyName(kv.first, name);
    const YAML::Node& val = kv.second;
    if (const Key* k = FindKey("", sec)) {
      k->parse(val, Origin{At(name, kv.first.Mark())}, c);
      c.explicit_keys[sec] = At(name, kv.first.Mark());
      continue;
    }
    bool known = false;
    for (const std::string& s : Sections()) known |= s == sec;
    if (!known) UnknownKey(At(name, kv.first.Mark()), "", sec);
    if (val.IsNull()) continue;  // "train:" with nothing under it
    if (!val.IsMap()) {
      throw InputError(fmt::format("{}: section '{}' must be a mapping of keys, not {}",
                                   At(name, val.Mark()), sec, Show(val)),
                       "indent its keys under it, e.g. '" + sec + ":\\n  key: value'");
    }
    ApplySection(val, name, sec, "", c);
  }
}

void ApplySet(const std::string& set, Config& c) {
  // Checked before the value is echoed in any message.
  CheckUtf8(set, "a --set argument", "pass the value as UTF-8", /*with_line=*/false);
  const std::string where = fmt::format("--set {}", set);
  auto eq = set.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw InputError(fmt::format("{}: expected section.key=value", where),
                     "e.g. --set optim.lr=1e-3 or --set placement.cpus=[[0,1],[2,3]]");
  }
  const std::string path = set.substr(0, eq), value = set.substr(eq + 1);
  std::string section, key;
  auto dot = path.find('.');
  if (dot == std::string::npos) {
    key = path;  // a top-level scalar such as topology
  } else {
    section = path.substr(0, dot);
    key = path.substr(dot + 1);
  }
  const Key* k = FindKey(section, key);
  if (!k) {
    const std::vector<std::string> secs = Sections();
    const std::string top = section.empty() ? key : section;
    if (std::find(secs.begin(), secs.end(), top) == secs.end()) UnknownKey(where, "", top);
    if (section.empty()) {  // "--set optim=1": a section, not a top-level scalar
      throw InputError(
          fmt::format("{}: section '{}' must be a mapping of keys, not a value", where, key),
          fmt::format("set one of its keys, e.g. --set {}.KEY=VALUE (cputrain-numa "
                      "config --keys lists them)",
                      key));
    }
    UnknownKey(where, section, key);
  }
  YAML::Node node;
  try {
    // A value that is not valid YAML (a path with ': ') is taken as a plain string.
    node = YAML::Load(value);
  } catch (const YAML::Exception&) {
    node = YAML::Node(value);
  }
  k->parse(node, Origin{where}, c);
  c.explicit_keys[path] = where;
}

// train.batch_tokens, if set, decides grad_accum_steps (a default 1 yields to it; any other value
// must agree).
void ResolveBatch(Config& c) {
  const long long bt = static_cast<long long>(c.data.batch_size) * c.data.seq_len;
  if (c.train.batch_tokens == 0) return;
  if (c.train.batch_tokens % bt != 0) {
    throw InputError(fmt::format("train.batch_tokens ({}) is not a multiple of data.batch_size x "
                                 "data.seq_len = {}",
                                 c.train.batch_tokens, bt),
                     fmt::format("use a multiple of {}, e.g. {}", bt,
                                 std::max(1LL, c.train.batch_tokens / bt) * bt));
  }
  const long long k = c.train.batch_tokens / bt;
  if (c.train.grad_accum_steps != 1 && c.train.grad_accum_steps != k) {
    throw InputError(
        fmt::format("train.batch_tokens ({}) and train.grad_accum_steps ({}) disagree: "
                    "{} tokens are {} micro-batches of {}",
                    c.train.batch_tokens, c.train.grad_accum_steps, c.train.batch_tokens, k, bt),
        "set only one of them");
  }
  if (k > kIntMax) throw InputError("train.batch_tokens is too large", "lower it");
  c.train.grad_accum_steps = static_cast<int>(k);
}

void Validate(const Config& c) {
  const std::string hint = "fix the config or pass --set to override";
  if (c.model.head_dim == 0 && c.model.channels % c.model.heads != 0) {
    throw InputError(fmt::format("model.heads ({}) must divide model.channels ({}), or set "
                                 "model.head_dim",
                                 c.model.heads, c.model.channels),
                     hint);
  }
  if (c.model.head != "lm" && c.model.head != "qa" && c.model.head != "classify") {
    throw InputError(fmt::format("model.head is '{}': it is lm, qa or classify", c.model.head),
                     hint);
  }
  const std::string& p = c.model.problem_type;
  if (!p.empty() && p != "single_label_classification" && p != "regression" &&
      p != "multi_label_classification") {
    throw InputError(fmt::format("model.problem_type is '{}': it is single_label_classification, "
                                 "regression or multi_label_classification",
                                 p),
                     hint);
  }
  if (c.model.rope_scaling == "llama3" &&
      !(c.model.rope_high_freq_factor > c.model.rope_low_freq_factor)) {
    throw InputError("model.rope_high_freq_factor must be larger than model.rope_low_freq_factor",
                     hint);
  }
  if (c.model.kv_heads != 0 && c.model.heads % c.model.kv_heads != 0) {
    throw InputError(fmt::format("model.kv_heads ({}) must divide model.heads ({})",
                                 c.model.kv_heads, c.model.heads),
                     hint);
  }
  if (c.model.init_from.empty() && c.data.seq_len > c.model.max_seq_len) {
    throw InputError(fmt::format("data.seq_len ({}) is larger than model.max_seq_len ({})",
                                 c.data.seq_len, c.model.max_seq_len),
                     "lower data.seq_len or raise model.max_seq_len");
  }
  if (c.optim.min_lr > c.optim.lr) {
    throw InputError(
        fmt::format("optim.min_lr ({}) is larger than optim.lr ({})", c.optim.min_lr, c.optim.lr),
        hint);
  }
  if (c.optim.schedule != Schedule::kConstant && c.optim.warmup_steps >= c.train.steps) {
    throw InputError(fmt::format("optim.warmup_steps ({}) must be smaller than train.steps ({}) "
                                 "for the cosine and linear schedules",
                                 c.optim.warmup_steps, c.train.steps),
                     "lower warmup_steps, raise train.steps, or use schedule: constant");
  }
  if (c.optim.beta1 >= 1 || c.optim.beta2 >= 1) {
    throw InputError("optim.beta1 and optim.beta2 must be below 1", hint);
  }
  if (c.train.out_dir.empty()) throw InputError("train.out_dir is empty", hint);
}

}  // namespace

const char* ScheduleName(Schedule s) {
  return s == Schedule::kConstant ? "constant" : s == Schedule::kLinear ? "linear" : "cosine";
}

const char* MpiModeName(MpiMode m) {
  return m == MpiMode::kAuto ? "auto" : m == MpiMode::kOn ? "on" : "off";
}

Config ParseConfig(const std::string& yaml_text, const std::string& name,
                   const std::vector<std::string>& sets) {
  Config c;
  // yaml-cpp passes bytes through: an overlong C0 84 would reach the values as U+0004, past the
  // control-character check (found by fuzz_config). The whole text is checked first.
  CheckUtf8(yaml_text, name, kUtf8Hint);
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw InputError(fmt::format("{}: not valid YAML: {}", At(name, e.mark), e.msg),
                     "fix the syntax at that line (indentation, a missing ':')");
  }
  ApplyDocument(root, name, c);
  for (const std::string& s : sets) ApplySet(s, c);
  ResolveBatch(c);
  Validate(c);
  c.source = sets.empty() ? name : fmt::format("{} + {} --set", name, sets.size());
  return c;
}

Config LoadConfig(const std::string& path, const std::vector<std::string>& sets) {
  if (path.empty()) {
    // The built-in config stands for the defaults: only --set keys were chosen by the user.
    Config c = ParseConfig(BuiltinConfigYaml(), "built-in quickstart config", sets);
    std::erase_if(c.explicit_keys, [](const auto& kv) { return !kv.second.starts_with("--set"); });
    return c;
  }
  const std::string text =
      ReadFile(path, InputKind{"config file", "a YAML file", kMaxConfigBytes,
                               "pass an existing YAML file to --config (see configs/)"});
  return ParseConfig(text, path, sets);
}

std::string ConfigToYaml(const Config& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::string open;
  for (const Key& k : Keys()) {
    if (k.section.empty()) {
      if (!open.empty()) out << YAML::EndMap, open.clear();
      out << YAML::Key << k.key << YAML::Value << k.dump(c);
      continue;
    }
    if (k.section != open) {
      if (!open.empty()) out << YAML::EndMap;
      out << YAML::Key << k.section << YAML::Value << YAML::BeginMap;
      open = k.section;
    }
    out << YAML::Key << k.key << YAML::Value << k.dump(c);
  }
  if (!open.empty()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::vector<ConfigKeyInfo> ConfigKeys() {
  const Config defaults;
  std::vector<ConfigKeyInfo> out;
  for (const Key& k : Keys()) {
    YAML::Emitter e;
    e << YAML::Flow << k.dump(defaults);
    out.push_back({k.section, k.key, k.type, e.c_str(), k.description});
  }
  return out;
}

}  // namespace cputrain
