// StopToken: a request that a long-running library loop (training, prepare-data) stop at its
// next safe point. The library only polls it; who requests a stop, and what the process does
// afterwards, is the CLI's business (src/cli/signals.h routes SIGINT/SIGTERM/SIGHUP to one).
//
// Thread safety: Request may be called from a signal handler (a lock-free atomic store is
// async-signal-safe) or any thread, concurrently with any number of readers. The first request
// wins; later ones are ignored.
//
// Ordering: relaxed is enough. The token carries no data besides its own value (the reason),
// and the loops that poll it agree on the stop step among themselves (across replica groups the
// main thread decides; across MPI ranks a collective does).
#pragma once

#include <atomic>

namespace cputrain {

class StopToken {
 public:
  // reason: why the stop was asked for, e.g. the signal number; must be non-zero.
  void Request(int reason) noexcept {
    int expected = 0;
    reason_.compare_exchange_strong(expected, reason, std::memory_order_relaxed);
  }
  bool requested() const noexcept { return reason_.load(std::memory_order_relaxed) != 0; }
  // The first Request's reason, or 0.
  int reason() const noexcept { return reason_.load(std::memory_order_relaxed); }
  // Back to "not requested" (a CLI that runs several commands in one process, tests).
  void Reset() noexcept { reason_.store(0, std::memory_order_relaxed); }

 private:
  static_assert(std::atomic<int>::is_always_lock_free, "Request must be async-signal-safe");
  std::atomic<int> reason_{0};
};

}  // namespace cputrain
