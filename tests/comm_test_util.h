// Helpers for the comm tests: run a function on one OS thread per (group, thread), the way the
// trainer's worker pools would, and collect what each thread threw.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/wait.h"

namespace cputrain::comm::testing {

inline std::string ErrorMessage(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "(non-std exception)";
  }
}

// Runs fn(g, t) for t in [0, tpg[g]) on its own std::thread and joins them all. Returns one
// exception_ptr per thread, in (g, t) order (null when the thread returned normally). A thread
// that throws calls on_error (if given) first: pass the communicator's Abort, so that a failed
// check in one thread makes the others throw instead of waiting forever for it.
inline std::vector<std::exception_ptr> RunSpmdCollect(const std::vector<int>& tpg,
                                                      const std::function<void(int, int)>& fn,
                                                      const std::function<void()>& on_error = {}) {
  std::vector<std::thread> threads;
  std::size_t total = 0;
  for (int t : tpg) total += static_cast<std::size_t>(t);
  std::vector<std::exception_ptr> errors(total);
  std::size_t k = 0;
  for (int g = 0; g < static_cast<int>(tpg.size()); ++g) {
    for (int t = 0; t < tpg[static_cast<std::size_t>(g)]; ++t, ++k) {
      threads.emplace_back([&fn, &errors, &on_error, g, t, k] {
        try {
          fn(g, t);
        } catch (...) {
          errors[k] = std::current_exception();
          if (on_error) on_error();
        }
      });
    }
  }
  for (std::thread& th : threads) th.join();
  return errors;
}

// Same, rethrowing the first exception that is not just the echo of an abort (so a failing
// thread fails the test with its own message).
inline void RunSpmd(const std::vector<int>& tpg, const std::function<void(int, int)>& fn,
                    const std::function<void()>& on_error = {}) {
  std::exception_ptr first;
  for (const std::exception_ptr& e : RunSpmdCollect(tpg, fn, on_error)) {
    if (!e) continue;
    if (!first || ErrorMessage(first).find("aborted") != std::string::npos) first = e;
  }
  if (first) std::rethrow_exception(first);
}

// The tests run up to 16 threads on a 2-core box: waiters must sleep soon instead of spinning
// away the CPU that the thread they wait for needs (wait.h SetSpinLimit).
inline void UseOversubscribedSpinLimit() { SetSpinLimit(64); }

// Thread layouts used across the tests: every group with 1 thread, with 2, and mixed.
enum class Layout { kOne, kTwo, kMixed };
inline std::vector<int> MakeLayout(int groups, Layout layout) {
  std::vector<int> tpg(static_cast<std::size_t>(groups));
  for (int g = 0; g < groups; ++g) {
    tpg[static_cast<std::size_t>(g)] = layout == Layout::kOne   ? 1
                                       : layout == Layout::kTwo ? 2
                                                                : 1 + (g % 2);
  }
  return tpg;
}
inline const char* LayoutName(Layout l) {
  return l == Layout::kOne ? "T1" : l == Layout::kTwo ? "T2" : "Tmixed";
}

}  // namespace cputrain::comm::testing
