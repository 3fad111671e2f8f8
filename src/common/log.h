// Diagnostics on stderr, one line each: "[   12.3s] warning: ...", the stamp being the time since
// the process started (one clock for every line, so a slow phase shows between two lines). The
// level is set by --log-level or CPUTRAIN_LOG (cli/main.cc). The verdict lines that main()
// prints last ("error:", "hint:", "stopped by ...") carry no stamp, so scripts match them at
// the start of a line.
//
// Diagnostics on stderr. Results (JSON, tables the user asked for) go to stdout; everything the
// program says about itself goes here, so `cputrain-numa topo --json | jq` always parses.
//
// Thread safety: every function may be called from any thread; lines are written whole.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace cputrain::log {

enum class Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// Messages above this level are dropped. Default kInfo; kError keeps only what main() prints
// itself (errors). Non-zero MPI ranks lower kInfo to kWarn (rank 0 speaks for the job).
void SetLevel(Level level);
Level GetLevel();
// A prefix such as "[rank 1] " put in front of every line.
void SetPrefix(std::string prefix);

void Write(Level level, std::string_view tag, std::string_view message);
// "[   12.3s] ": the stamp Write puts first, for lines written elsewhere (progress lines).
std::string Stamp();

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
