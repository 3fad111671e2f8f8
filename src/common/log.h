// Diagnostics on stderr. Results (JSON, tables the user asked for) go to stdout; everything the
// program says about itself goes here, so `cputrain-numa topo --json | jq` always parses.
//
// Thread safety: every function may be called from any thread; lines are written whole.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace cputrain::log {

enum class Level { kQuiet = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// Messages above this level are dropped. Default kInfo. Non-zero MPI ranks set kWarn.
void SetLevel(Level level);
Level GetLevel();
// A prefix such as "[rank 1] " put in front of every line.
void SetPrefix(std::string prefix);

void Write(Level level, std::string_view tag, std::string_view message);

template <typename... Args>
void Info(fmt::format_string<Args...> f, Args&&... args) {
  Write(Level::kInfo, "", fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Warn(fmt::format_string<Args...> f, Args&&... args) {
  Write(Level::kWarn, "warning: ", fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Debug(fmt::format_string<Args...> f, Args&&... args) {
  Write(Level::kDebug, "debug: ", fmt::format(f, std::forward<Args>(args)...));
}

// Says `message` once per process for a given `key` (e.g. "simulated-topology"), so an explained
// fallback is visible but not repeated per thread or per buffer.
void NoticeOnce(std::string_view key, std::string_view message);

}  // namespace cputrain::log
