#include "common/log.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <set>

namespace cputrain::log {
namespace {

// Logging is off the hot path; a mutex keeps lines whole and guards the once-set.
std::mutex& Mu() {
  static std::mutex mu;
  return mu;
}
Level g_level = Level::kInfo;
// The origin of the elapsed-time stamps: static initialization, i.e. the process's start.
const std::chrono::steady_clock::time_point g_start = std::chrono::steady_clock::now();
std::string& Prefix() {
  static std::string prefix;
  return prefix;
}

}  // namespace

void SetLevel(Level level) {
  std::lock_guard<std::mutex> lock(Mu());
  g_level = level;
}

Level GetLevel() {
  std::lock_guard<std::mutex> lock(Mu());
  return g_level;
}

void SetPrefix(std::string prefix) {
  std::lock_guard<std::mutex> lock(Mu());
  Prefix() = std::move(prefix);
}

std::string Stamp() {
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
  return fmt::format("[{:7.1f}s] ", s);
}

void Write(Level level, std::string_view tag, std::string_view message) {
  std::lock_guard<std::mutex> lock(Mu());
  if (static_cast<int>(level) > static_cast<int>(g_level)) return;
  std::string line = Stamp();
  line += Prefix();
  line += tag;
  line += message;
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

void NoticeOnce(std::string_view key, std::string_view message) {
  {
    static std::set<std::string, std::less<>> said;
    std::lock_guard<std::mutex> lock(Mu());
    if (said.count(key)) return;
    said.emplace(key);
  }
  Write(Level::kInfo, "note: ", message);
}

}  // namespace cputrain::log
