// WorkerPool: the persistent, pinned worker threads of one replica group.
//
// A pool owns one thread per planned CPU, created once and bound to that CPU (through the
// topology's Binder; on a simulated machine binding is skipped). Worker 0 is the group's
// driver: Run(fn) executes fn on worker 0, and inside it ForEachThread / ParallelFor fork the
// work to all workers and join — a static partition, no thread created per step, no heap
// allocation per call. Idle workers spin briefly, then sleep on a futex (common/wait.h).
//
// Thread-safety contract:
//  1. Run / Start+Wait are called by one external thread at a time per pool (not by a worker of
//     the same pool). Different pools run concurrently (one per group).
//  2. ForEachThread / ParallelFor may be called from worker 0 inside Run (the fast path) or
//     from an external thread (then it is wrapped in Run). They do not nest: a job must not
//     call ForEachThread on its own pool.
//  3. Barrier() is called by every worker of the pool inside the same ForEachThread job, the
//     same number of times.
//  4. Everything written before ForEachThread is visible to every job; everything a job wrote
//     is visible after ForEachThread returns (release/acquire through the job and done words).
//  5. An exception thrown by a job on any worker is rethrown to the caller of ForEachThread
//     (the first one, if several), after every worker has finished the job.
//
// The destructor stops and joins the threads; no call may be in flight.
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/function_ref.h"
#include "common/wait.h"
#include "topology/binding.h"

namespace cputrain {

class WorkerPool {
 public:
  // One worker per entry of `cpus` (OS indexes). `binder` pins each worker to its CPU; it must
  // outlive the pool. Throws RuntimeError if a worker cannot be bound.
  WorkerPool(std::vector<int> cpus, topo::Binder* binder, std::string name);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int size() const { return static_cast<int>(cpus_.size()); }
  const std::vector<int>& cpus() const { return cpus_; }
  const std::string& name() const { return name_; }

  // Runs fn on worker 0 and returns when it is done (rethrowing its exception).
  void Run(FunctionRef<void()> fn);
  // Run split in two, to drive several pools at once: Start returns at once, Wait joins. The
  // callable must stay alive until Wait returns.
  void Start(FunctionRef<void()> fn);
  void Wait();

  // fn(tid) on every worker, tid in [0, size()).
  void ForEachThread(FunctionRef<void(int)> fn);
  // [0, n) split into size() contiguous ranges (the first n % size() get one more);
  // fn(begin, end, tid) on every worker whose range is non-empty.
  void ParallelFor(std::size_t n, FunctionRef<void(std::size_t, std::size_t, int)> fn);
  // The range ParallelFor gives worker tid.
  static void Split(std::size_t n, int parts, int tid, std::size_t* begin, std::size_t* end);

  // Waits until every worker of the pool has called Barrier (inside a ForEachThread job).
  void Barrier();

  // The calling thread's worker index in this pool, or -1 if it is not one of its workers.
  int ThisThreadId() const;
  // What each worker's binding read back from the OS right after it was bound (empty on a
  // simulated machine), and the CPU it was running on then. For tests and placement reports.
  std::vector<std::vector<int>> BindingsReadBack() const { return bindings_; }
  std::vector<int> CpusSeenAtStart() const { return cpus_seen_; }

 private:
  void WorkerMain(int tid);
  void RecordError(std::exception_ptr e);
  void RethrowError();
  void Shutdown();

  const std::vector<int> cpus_;
  const std::string name_;
  topo::Binder* binder_;
  std::vector<std::thread> threads_;
  std::vector<std::vector<int>> bindings_;
  std::vector<int> cpus_seen_;

  // Fork/join of ForEachThread. job_ is written by worker 0 before job_seq_ is published and
  // read by workers after they observe it (the WaitWord's release/acquire pair).
  std::optional<FunctionRef<void(int)>> job_;
  WaitWord job_seq_;
  WaitWord job_done_;
  uint32_t job_count_ = 0;  // owned by worker 0: jobs published so far

  // Run on worker 0: main_fn_ published through main_seq_, completion through main_done_.
  std::optional<FunctionRef<void()>> main_fn_;
  WaitWord main_seq_;
  WaitWord main_done_;
  uint32_t main_count_ = 0;        // owned by the external caller
  std::exception_ptr main_error_;  // written by worker 0 before main_done_ is published

  // Barrier: arrivals counted in barrier_arrived_ (on its own line: every worker hits it), the
  // last one bumps barrier_gen_.
  alignas(kCacheLine) std::atomic<int> barrier_arrived_{0};
  WaitWord barrier_gen_;

  // Startup handshake and stop flag.
  WaitWord started_;
  std::atomic<bool> stop_{false};

  // First exception from a job; errors are off the hot path, so a mutex is fine here.
  std::mutex error_mu_;
  std::exception_ptr job_error_;
};

}  // namespace cputrain
