#include "common/wait.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>

namespace cputrain {
namespace {

constexpr uint32_t kSpinOneThreadPerCpu = 20000;
constexpr uint32_t kSpinOversubscribed = 64;
std::atomic<uint32_t> g_spin_override{0};
std::atomic<int> g_waiting_threads{0};

// The CPUs the process may use, read once at start-up by the main thread. Not lazily: the first
// caller may be a pinned worker, whose own mask has one CPU, which would make two pinned workers
// look oversubscribed (seen in the collectives bench: 4 KiB reduce-scatters at 50 us, not 0.3).
int CountProcessCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
}
const int g_process_cpus = CountProcessCpus();

int UsableCpus() { return g_process_cpus; }

long Futex(const std::atomic<uint32_t>* addr, int op, uint32_t val) {
  // std::atomic<uint32_t> is a plain 32-bit word (static_assert below); the kernel reads it.
  return syscall(SYS_futex, reinterpret_cast<const uint32_t*>(addr), op, val, nullptr, nullptr, 0);
}
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
static_assert(std::atomic<uint32_t>::is_always_lock_free);

}  // namespace

void SetSpinLimit(uint32_t pauses) { g_spin_override.store(pauses, std::memory_order_relaxed); }

uint32_t SpinLimit() {
  const uint32_t pinned = g_spin_override.load(std::memory_order_relaxed);
  if (pinned != 0) return pinned;
  return g_waiting_threads.load(std::memory_order_relaxed) > UsableCpus() ? kSpinOversubscribed
                                                                          : kSpinOneThreadPerCpu;
}

void AddWaitingThreads(int delta) { g_waiting_threads.fetch_add(delta, std::memory_order_relaxed); }

uint32_t WaitWord::WaitSlow(uint32_t target) const {
  const uint32_t spins = SpinLimit();
  for (uint32_t i = 0; i < spins; ++i) {
    CpuRelax();
    uint32_t v = Load();
    if (SeqAtLeast(v, target)) return v;
  }
  for (;;) {
    // Register as a sleeper before the final check (seq_cst, pairs with Publish: either the
    // publisher sees sleepers_ > 0 and wakes us, or we see its new value here).
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    // seq_cst loads are acquires too: seeing the target here orders the publisher's writes.
    uint32_t v = word_.load(std::memory_order_seq_cst);
    if (SeqAtLeast(v, target)) {
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      return v;
    }
    // Sleeps only if word_ still equals v (checked atomically by the kernel), so a publish
    // between our load and this call makes it return at once.
    Futex(&word_, FUTEX_WAIT_PRIVATE, v);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    v = Load();
    if (SeqAtLeast(v, target)) return v;
  }
}

void WaitWord::WakeIfSleepers() {
  if (sleepers_.load(std::memory_order_seq_cst) != 0) Futex(&word_, FUTEX_WAKE_PRIVATE, INT_MAX);
}

}  // namespace cputrain
