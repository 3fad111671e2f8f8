// kernels/kernel_choice.h (internal to kernels/): what the bf16 and the fp32 kernel choices share
// (bf16_kernel.cc, sgemm.cc): the environment's override of auto, and the words that say who
// chose.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>

#include "common/error.h"
#include "kernels/kernels.h"

namespace cputrain::kernels::internal {

// Each class's kernel K (an enum), as an int; -1 until the first use resolves auto. Written (Set,
// SetAll) by the thread that sets up a run, before its workers start or between runs; read (Get)
// by every worker's product: the release stores and acquire loads make a kernel set after the
// workers started (a second train::Train in one process, a test) visible to the next product
// they run; the workers' pool handoff already orders the usual case. One word per class: a
// product reads only its own class's. Forced(): the last SetAll named its kernel (the config or
// the environment); only the setting-up thread reads it, so relaxed is enough.
template <class K>
class ClassTable {
 public:
  ClassTable() {
    for (std::atomic<int>& x : k_) x.store(-1, std::memory_order_relaxed);
  }
  void Set(GemmClass c, K k) {
    k_[static_cast<int>(c)].store(static_cast<int>(k), std::memory_order_release);
  }
  void SetAll(K k, bool forced) {
    for (int c = 0; c < kGemmClasses; ++c) Set(static_cast<GemmClass>(c), k);
    forced_.store(forced, std::memory_order_relaxed);
  }
  // -1 while unset.
  int Get(GemmClass c) const { return k_[static_cast<int>(c)].load(std::memory_order_acquire); }
  bool Forced() const { return forced_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int> k_[kGemmClasses];
  std::atomic<bool> forced_{false};
};

// The kernel the environment variable `env` names (parsed by `parse`), or nullopt where it is
// unset or empty; InputError naming the variable and the valid `names` where it names none.
template <class K, class Parse>
std::optional<K> EnvKernel(const char* env, Parse parse, const std::string& names) {
  const char* v = std::getenv(env);
  if (v == nullptr || *v == '\0') return std::nullopt;
  const std::optional<K> k = parse(v);
  if (!k) {
    throw InputError(fmt::format("{}={} is not one of auto, {}", env, v, names),
                     fmt::format("use one of auto, {}; or unset it", names));
  }
  return k;
}

// "chosen by train.bf16_kernel" (by_key: the config named it), "chosen by CPUTRAIN_BF16_KERNEL=amx"
// (auto, overridden by the environment), or "chosen by auto".
inline std::string ChosenBy(bool by_key, const char* key, const char* env) {
  if (by_key) return fmt::format("chosen by {}", key);
  const char* v = std::getenv(env);
  if (v != nullptr && *v != '\0') return fmt::format("chosen by {}={}", env, v);
  return "chosen by auto";
}

}  // namespace cputrain::kernels::internal
