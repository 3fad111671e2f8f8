#include "bench/lora_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/error.h"
#include "model/params.h"
#include "model/transformer.h"

namespace cputrain::bench {
namespace {

const char* const kSyntax =
    "--lora r=R[,alpha=A][,targets=NAME+NAME...][,base=fp32|bf16], e.g. --lora r=16 or --lora "
    "r=16,alpha=32,targets=q_proj+v_proj";

[[noreturn]] void Bad(const std::string& text, const std::string& why) {
  throw InputError(fmt::format("--lora '{}': {}", text, why), kSyntax);
}

bool IsName(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t b = 0;
  while (true) {
    const std::size_t e = s.find(sep, b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) return out;
    b = e + 1;
  }
}

}  // namespace

std::string LoraSpec::Text() const {
  std::string t = fmt::format("r={},alpha={:g}", r, alpha);
  if (!targets.empty()) t += fmt::format(",targets={}", fmt::join(targets, "+"));
  if (base_bf16) t += ",base=bf16";
  return t;
}

LoraSpec ParseLoraSpec(const std::string& text) {
  LoraSpec spec;
  bool have_alpha = false, have_targets = false, have_base = false;
  for (const std::string& item : Split(text, ',')) {
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) Bad(text, fmt::format("'{}' is not key=value", item));
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (value.empty()) Bad(text, fmt::format("'{}' has no value", key));
    if (key == "r") {
      if (spec.r != 0) Bad(text, "r is given twice");
      const bool digits = value.size() <= 4 && std::all_of(value.begin(), value.end(), [](char c) {
                            return c >= '0' && c <= '9';
                          });
      spec.r = digits ? std::stoi(value) : 0;
      if (spec.r < 1 || spec.r > 4096) {
        Bad(text, fmt::format("r={} is not a rank in [1, 4096]", value));
      }
    } else if (key == "alpha") {
      if (have_alpha) Bad(text, "alpha is given twice");
      std::istringstream in(value);
      in >> spec.alpha;
      if (in.fail() || !in.eof() || !std::isfinite(spec.alpha) || spec.alpha <= 0 ||
          spec.alpha > 1e6) {
        Bad(text, fmt::format("alpha={} is not a number in (0, 1e6]", value));
      }
      have_alpha = true;
    } else if (key == "targets") {
      if (have_targets) Bad(text, "targets is given twice");
      for (const std::string& name : Split(value, '+')) {
        if (!IsName(name)) {
          Bad(text, fmt::format("target '{}' is not a module name (letters, digits, _ . -; "
                                "several joined by +)",
                                name));
        }
        if (std::find(spec.targets.begin(), spec.targets.end(), name) != spec.targets.end()) {
          Bad(text, fmt::format("target '{}' is given twice", name));
        }
        spec.targets.push_back(name);
      }
      have_targets = true;
    } else if (key == "base") {
      if (have_base) Bad(text, "base is given twice");
      if (value != "fp32" && value != "bf16") {
        Bad(text, fmt::format("base={}: the frozen base is fp32 or bf16", value));
      }
      spec.base_bf16 = value == "bf16";
      have_base = true;
    } else {
      Bad(text, fmt::format("unknown key '{}' (keys: r, alpha, targets, base)", key));
    }
  }
  if (spec.r == 0) Bad(text, "r (the rank) is required");
  if (!have_alpha) spec.alpha = 2.0 * spec.r;
  return spec;
}

LoraRun::LoraRun(const model::Shape& shape, const LoraSpec& spec) : spec_(spec) {
  model::LoraConfig cfg;
  cfg.r = spec.r;
  cfg.alpha = static_cast<float>(spec.alpha);
  cfg.dropout = 0;
  cfg.target_modules = spec.targets;
  lora_ = std::make_unique<model::Lora>(model::ParamLayout(shape), cfg);
}

std::size_t LoraRun::trainable() const { return lora_->layout().total(); }
std::size_t LoraRun::base_params() const { return lora_->base().total(); }

void LoraRun::ApplyTo(Config* config) const {
  LoraTrainConfig& l = config->train.lora;
  l.r = spec_.r;
  l.alpha = spec_.alpha;
  l.dropout = 0;
  l.target_modules = spec_.targets;
  l.modules_to_save.clear();
  l.init = "default";
  l.adapter.clear();
  l.base_dtype = spec_.base_bf16 && config->train.bf16 ? "bf16" : "fp32";
}

std::vector<std::string> LoraRun::PytorchArgs() const {
  std::vector<std::string> args = {
      "--lora-r",       std::to_string(spec_.r),
      "--lora-alpha",   fmt::format("{:g}", spec_.alpha),
      "--lora-targets", fmt::format("{}", fmt::join(lora_->TargetNames(), ","))};
  const std::vector<std::string> saved = lora_->SavedNames();
  if (!saved.empty()) {
    args.insert(args.end(), {"--lora-save", fmt::format("{}", fmt::join(saved, ","))});
  }
  return args;
}

double LoraRun::FlopsPerToken(int T) const {
  const model::Shape& s = lora_->base().shape();
  const double attention = 12.0 * s.L * T * s.C;
  // The weights of the products, as TrainFlopsPerToken counts them (6 each).
  const double weights = (model::TrainFlopsPerToken(s, T) - attention) / 6;
  double adapters = 0, saved_head = 0;
  for (const model::LoraSite& site : lora_->sites()) {
    adapters += static_cast<double>(s.L) * spec_.r * (site.in + site.rows);
  }
  for (const model::LoraSaved& x : lora_->saved()) {
    // A head that trains fully: its weights, as TrainFlopsPerToken counts them, cost 6.
    if (x.t == model::kLmHead || x.t == model::kHeadw) {
      saved_head = s.head == model::Head::kLm     ? static_cast<double>(s.V) * s.C
                   : s.head == model::Head::kSpan ? 2.0 * s.C
                                                  : (s.C + s.labels) * s.C / std::max(T, 1);
    }
  }
  return 4 * weights + 6 * adapters + 2 * saved_head + attention;
}

uint64_t GroupSyncBytes(std::size_t n, int G, bool shared_replica) {
  if (G < 2) return 0;
  const uint64_t one = static_cast<uint64_t>(G - 1) * 4 * n;
  return shared_replica ? one : 2 * one;
}

uint64_t DdpSyncBytes(std::size_t n, int P) {
  return P < 2 ? 0 : 2 * static_cast<uint64_t>(P - 1) * 4 * n;
}

}  // namespace cputrain::bench
