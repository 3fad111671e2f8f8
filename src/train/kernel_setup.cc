// The kernels of a run's products (train/kernel_setup.h).
#include "train/kernel_setup.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "common/log.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"

namespace cputrain::train {
namespace {

bool Recalibrate() {
  const char* v = std::getenv(kRecalibrateEnv);
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

// The checkpoint's choice for `precision` where it was made on this machine and still runs here.
std::optional<kernels::KernelChoice> FromCheckpoint(const nlohmann::json& resumed,
                                                    const std::string& precision,
                                                    const std::string& machine) {
  if (!resumed.is_object() || !resumed.contains(precision)) return std::nullopt;
  if (resumed.value("machine", "") != machine) {
    log::Warn(
        "the checkpoint's {} kernels were chosen on another machine ({}); here they are chosen "
        "again, so the products' rounding changes from the resumed step on",
        precision, resumed.value("machine", "?").substr(0, 120));
    return std::nullopt;
  }
  std::optional<kernels::KernelChoice> c = kernels::ChoiceFromJson(resumed[precision].dump());
  if (c && kernels::ApplyChoice(*c)) {
    c->source = "checkpoint";
    return c;
  }
  log::Warn("the checkpoint's {} kernels cannot all run in this build: chosen again", precision);
  return std::nullopt;
}

std::optional<kernels::KernelChoice> Choose(model::ProductWorks& works,
                                            const std::string& precision, double planned_flops,
                                            const nlohmann::json& resumed,
                                            const kernels::CalibrationCache& cache) {
  const bool forced =
      precision == "fp32" ? kernels::Fp32KernelForced() : kernels::Bf16KernelForced();
  if (forced || !works.Runs(precision)) return std::nullopt;
  if (auto c = FromCheckpoint(resumed, precision, kernels::MachineKey())) return c;
  kernels::CalibrationRequest req;
  req.precision = precision;
  req.works = [&works, precision](double target) { return works.Works(precision, target); };
  req.workload = works.Workload(precision);
  req.planned_flops = planned_flops;
  const auto t0 = std::chrono::steady_clock::now();
  kernels::KernelChoice c = kernels::Calibrate(req, cache, Recalibrate());
  // What measuring cost in all: the buffers' first touch too (ProductWorks allocates them on its
  // first Works()).
  if (c.source == "measured")
    c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

// Logs `text` a line per log line, so that each carries its stamp.
void LogLines(const std::string& text) {
  std::size_t b = 0;
  while (b < text.size()) {
    const std::size_t e = std::min(text.find('\n', b), text.size());
    if (e > b) log::Info("{}", text.substr(b, e - b));
    b = e + 1;
  }
}

}  // namespace

nlohmann::json KernelSetup::ToJson() const {
  nlohmann::json j = {{"machine", kernels::MachineKey()}};
  if (fp32) j["fp32"] = nlohmann::json::parse(kernels::ChoiceToJson(*fp32));
  if (bf16) j["bf16"] = nlohmann::json::parse(kernels::ChoiceToJson(*bf16));
  return j;
}

KernelSetup SetUpKernels(WorkerPool& pool, const model::ProductRun& run, double planned_flops,
                         const nlohmann::json& resumed, bool announce) {
  model::ProductWorks works(pool, run);
  const kernels::CalibrationCache cache;
  KernelSetup k;
  k.fp32 = Choose(works, "fp32", planned_flops, resumed, cache);
  if (run.bf16) k.bf16 = Choose(works, "bf16", planned_flops, resumed, cache);
  if (!announce) return k;
  for (const auto* c : {&k.fp32, &k.bf16}) {
    if (*c) LogLines(kernels::DescribeChoice(**c));
  }
  if (const std::string d = kernels::LibraryDiagnosis(k.fp32 ? &*k.fp32 : nullptr); !d.empty())
    LogLines(d);
  return k;
}

}  // namespace cputrain::train
