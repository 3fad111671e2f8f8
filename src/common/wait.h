// WaitWord: a 32-bit counter that threads publish to and wait on — a bounded spin, then a
// futex sleep. It is the one blocking primitive of the hot paths (worker pool fork/join,
// collectives between groups, gradient-bucket hand-off): no mutex, no condition variable.
//
// Thread safety: any number of threads may call Load/WaitAtLeast concurrently with any number
// calling Publish/Add. Values only grow (modulo 2^32); "at least" compares with wrap-around
// (serial-number arithmetic), so a counter may run forever.
//
// Ordering contract: everything a thread wrote before Publish(v)/Add() happens-before
// everything a thread does after its WaitAtLeast(v) (or Load() >= v) returns. That is the
// release/acquire pair below; the extra seq_cst on the sleeper protocol is for wake-ups only.
//
// Lifetime: a WaitWord may be destroyed once no thread can be inside WaitAtLeast on it.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/cache_line.h"

namespace cputrain {

// How many pause iterations a waiter spins before it sleeps. ~20k pauses (tens of microseconds)
// suit one thread per core. With more waiting threads than CPUs (simulated topologies, comm
// threads sharing cores) spinning steals the CPU the awaited thread needs: measured on this
// 2-core box, 2000 fork/joins of a 4-thread pool took 7.0 s with the long spin and 0.1 s with
// 64 pauses. So thread owners register their threads (AddWaitingThreads) and the limit drops to
// 64 pauses while they outnumber the CPUs this process may run on. SetSpinLimit pins a value
// (0 = back to automatic). Process-wide; relaxed: a tuning hint, not a synchronizer.
void SetSpinLimit(uint32_t pauses);
uint32_t SpinLimit();
void AddWaitingThreads(int delta);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

// True if a is at or past b in serial-number order.
inline bool SeqAtLeast(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) >= 0; }

class alignas(kCacheLine) WaitWord {
 public:
  explicit WaitWord(uint32_t initial = 0) : word_(initial) {}
  WaitWord(const WaitWord&) = delete;
  WaitWord& operator=(const WaitWord&) = delete;

  // Acquire: a reader that sees value v also sees every write made before it was published.
  uint32_t Load() const { return word_.load(std::memory_order_acquire); }

  // Stores v and wakes sleepers. seq_cst rather than release: the store must be ordered before
  // the load of sleepers_ in WakeIfSleepers (a store->load pair, which only seq_cst orders), or
  // a waiter that registered just now could sleep through this update.
  void Publish(uint32_t v) {
    word_.store(v, std::memory_order_seq_cst);
    WakeIfSleepers();
  }

  // Adds d and wakes sleepers; returns the new value. seq_cst for the same reason as Publish;
  // the read-modify-write also makes concurrent adders each see a distinct value.
  uint32_t Add(uint32_t d) {
    uint32_t v = word_.fetch_add(d, std::memory_order_seq_cst) + d;
    WakeIfSleepers();
    return v;
  }

  // Returns once Load() is at least `target` (serial order); returns the value seen.
  uint32_t WaitAtLeast(uint32_t target) const {
    uint32_t v = Load();
    if (SeqAtLeast(v, target)) return v;
    return WaitSlow(target);
  }

 private:
  uint32_t WaitSlow(uint32_t target) const;
  void WakeIfSleepers();

  std::atomic<uint32_t> word_;
  // Number of threads in (or entering) futex sleep on word_. Read by every publisher, written
  // only by sleepers, so sharing the line with word_ costs nothing extra on the fast path.
  mutable std::atomic<uint32_t> sleepers_{0};
};

}  // namespace cputrain
