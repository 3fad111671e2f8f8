#include "comm/sync.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

namespace cputrain::comm::internal {

bool AbortState::Set(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load(std::memory_order_relaxed)) return false;  // under mu_: only Set writes it
  reason_ = reason;
  // Release: a thread that reads true also reads reason_ (and is ordered before the poisoning
  // adds that follow in this thread, which is what wakes the futex sleepers).
  aborted_.store(true, std::memory_order_release);
  return true;
}

std::string AbortState::reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

WaitResult WaitAtLeast(const WaitWord& w, uint32_t target, std::chrono::nanoseconds timeout,
                       const AbortState& abort) {
  if (!SeqAtLeast(w.Load(), target)) {
    if (abort.IsSet()) return WaitResult::kAborted;
    if (timeout.count() == 0) {
      w.WaitAtLeast(target);
    } else {
      using Clock = std::chrono::steady_clock;
      const Clock::time_point deadline = Clock::now() + timeout;
      bool reached = false;
      for (uint32_t i = 0, spins = SpinLimit(); i < spins; ++i) {
        CpuRelax();
        if (SeqAtLeast(w.Load(), target)) {
          reached = true;
          break;
        }
      }
      std::chrono::microseconds nap(1);
      while (!reached) {
        if (SeqAtLeast(w.Load(), target)) break;
        if (abort.IsSet()) return WaitResult::kAborted;
        if (Clock::now() >= deadline) return WaitResult::kTimedOut;
        std::this_thread::sleep_for(nap);
        nap = std::min(nap * 2, std::chrono::microseconds(100));
      }
    }
  }
  // The target may have been reached by a poisoning add: the flag tells (see the header).
  return abort.IsSet() ? WaitResult::kAborted : WaitResult::kReached;
}

std::string FormatDuration(std::chrono::nanoseconds d) {
  const double s = std::chrono::duration<double>(d).count();
  if (s >= 1.0) return fmt::format("{:g} s", s);
  if (s >= 1e-3) return fmt::format("{:g} ms", s * 1e3);
  return fmt::format("{:g} us", s * 1e6);
}

}  // namespace cputrain::comm::internal
