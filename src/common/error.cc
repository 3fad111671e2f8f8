#include "common/error.h"

#include <fmt/format.h>

namespace cputrain {

void CheckFailed(const char* file, int line, const char* expr, const std::string& msg) {
  throw RuntimeError(
      fmt::format("internal error at {}:{}: check '{}' failed: {}", file, line, expr, msg),
      "this is a bug in cputrain-numa; please report it with the command line");
}

}  // namespace cputrain
