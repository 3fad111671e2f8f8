// kernels/kernel_choice.h (internal to kernels/): what the bf16 and the fp32 kernel choices share
// (bf16_kernel.cc, sgemm.cc): the environment's override of auto, and the words that say who
// chose.
#pragma once

#include <fmt/format.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "common/error.h"

namespace cputrain::kernels::internal {

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
