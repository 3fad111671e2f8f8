// Internal to src/comm: the abort flag and the (optionally timed) wait that the communicator and
// BucketSync share. Not part of the public API.
//
// Abort protocol: the first Abort() records the reason, sets the flag (release) and then adds
// kPoison to every WaitWord its owner waits on. A waiter sleeping on the futex is woken by that
// add and finds its target reached (targets are never more than a few phases ahead of the
// counter, far less than kPoison); it then reads the flag, which the poisoning add made visible
// (the add follows the flag's store in the aborting thread, and the waiter's acquire load read the
// add's value), and throws. A polling (timed) waiter sees the flag directly.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "common/wait.h"

namespace cputrain::comm::internal {

// Added to a counter to wake everybody waiting on it after an abort. Far above any distance
// between a target and its counter, far below 2^31 so serial comparisons stay meaningful.
inline constexpr uint32_t kPoison = 1u << 30;

class AbortState {
 public:
  // Records `reason` and sets the flag; true for the first caller only, which must then add
  // kPoison to every word its waiters may sleep on.
  bool Set(const std::string& reason);

  // Acquire: pairs with the release store in Set, so a thread that sees true also sees the
  // reason written before it (read under the mutex anyway) and every poisoning add ordered after.
  bool IsSet() const { return aborted_.load(std::memory_order_acquire); }

  std::string reason() const;

 private:
  // Read by every wait (shared, read-mostly: on its own line so counter traffic never evicts it).
  alignas(kCacheLine) std::atomic<bool> aborted_{false};
  // Off the hot path (only an abort writes it), so a mutex is fine here.
  alignas(kCacheLine) mutable std::mutex mu_;
  std::string reason_;
};

enum class WaitResult { kReached, kAborted, kTimedOut };

// Waits until w.Load() >= target (serial order). timeout == 0: spin then futex sleep (WaitWord).
// Otherwise: spin SpinLimit() times, then poll with sleeps growing from 1 µs to at most 100 µs,
// until the deadline. kAborted when the abort flag is seen set, before or after the target.
// The acquire of the successful load carries the WaitWord ordering contract to the caller.
WaitResult WaitAtLeast(const WaitWord& w, uint32_t target, std::chrono::nanoseconds timeout,
                       const AbortState& abort);

// "250 ms", "1.5 s": for timeout messages.
std::string FormatDuration(std::chrono::nanoseconds d);

}  // namespace cputrain::comm::internal
