#include "runtime/worker_pool.h"

#include <fmt/format.h>
#include <pthread.h>

#include "common/error.h"

namespace cputrain {
namespace {

// Which pool and worker index the calling thread is (set once when a worker starts).
thread_local const WorkerPool* tl_pool = nullptr;
thread_local int tl_tid = -1;

}  // namespace

WorkerPool::WorkerPool(std::vector<int> cpus, topo::Binder* binder, std::string name)
    : cpus_(std::move(cpus)), name_(std::move(name)), binder_(binder) {
  CPUTRAIN_CHECK(!cpus_.empty(), "a worker pool needs at least one CPU");
  bindings_.resize(cpus_.size());
  cpus_seen_.assign(cpus_.size(), -1);
  threads_.reserve(cpus_.size());
  AddWaitingThreads(size());
  for (int t = 0; t < size(); ++t) threads_.emplace_back([this, t] { WorkerMain(t); });
  // started_ counts workers that finished binding (acquire: their bindings_ slots are written).
  started_.WaitAtLeast(static_cast<uint32_t>(size()));
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    err = job_error_;
    job_error_ = nullptr;
  }
  if (err) {
    Shutdown();
    std::rethrow_exception(err);
  }
}

WorkerPool::~WorkerPool() { Shutdown(); }

void WorkerPool::Shutdown() {
  if (threads_.empty()) return;
  // release: workers that observe the bumped words below also observe stop_.
  stop_.store(true, std::memory_order_release);
  job_seq_.Publish(job_count_ + 1);
  main_seq_.Publish(main_count_ + 1);
  for (std::thread& th : threads_) th.join();
  threads_.clear();
  AddWaitingThreads(-size());
}

void WorkerPool::WorkerMain(int tid) {
  tl_pool = this;
  tl_tid = tid;
  std::string tname = fmt::format("{}w{}", name_, tid).substr(0, 15);
  pthread_setname_np(pthread_self(), tname.c_str());
  try {
    if (binder_) {
      binder_->BindThisThread({cpus_[tid]});
      bindings_[tid] = binder_->ThisThreadBinding();
      cpus_seen_[tid] = binder_->CurrentCpu();
    }
  } catch (...) {
    RecordError(std::current_exception());
  }
  started_.Add(1);

  uint32_t seen = 0;
  if (tid == 0) {
    for (;;) {
      seen = main_seq_.WaitAtLeast(seen + 1);
      if (stop_.load(std::memory_order_acquire)) return;
      try {
        (*main_fn_)();
      } catch (...) {
        main_error_ = std::current_exception();
      }
      main_done_.Publish(seen);  // release: main_error_ and fn's writes reach the caller
    }
  }
  for (;;) {
    seen = job_seq_.WaitAtLeast(seen + 1);
    if (stop_.load(std::memory_order_acquire)) return;
    try {
      (*job_)(tid);
    } catch (...) {
      RecordError(std::current_exception());
    }
    job_done_.Add(1);  // release: this job's writes reach worker 0's acquire in ForEachThread
  }
}

void WorkerPool::Start(FunctionRef<void()> fn) {
  CPUTRAIN_CHECK(tl_pool != this, "WorkerPool::Start called from one of its own workers");
  main_fn_.emplace(fn);
  main_seq_.Publish(++main_count_);  // release: main_fn_ is visible to worker 0
}

void WorkerPool::Wait() {
  main_done_.WaitAtLeast(main_count_);
  std::exception_ptr err = main_error_;
  main_error_ = nullptr;
  if (err) std::rethrow_exception(err);
}

void WorkerPool::Run(FunctionRef<void()> fn) {
  Start(fn);
  Wait();
}

void WorkerPool::ForEachThread(FunctionRef<void(int)> fn) {
  const int me = ThisThreadId();
  if (me != 0) {
    CPUTRAIN_CHECK(me < 0, "ForEachThread called from inside a job of the same pool");
    Run([&] { ForEachThread(fn); });
    return;
  }
  if (size() == 1) {
    fn(0);
    return;
  }
  job_.emplace(fn);
  job_seq_.Publish(++job_count_);  // release: job_ and the caller's writes reach the workers
  try {
    fn(0);
  } catch (...) {
    RecordError(std::current_exception());
  }
  // acquire: every worker's writes in this job are visible from here on.
  job_done_.WaitAtLeast(job_count_ * static_cast<uint32_t>(size() - 1));
  RethrowError();
}

void WorkerPool::Split(std::size_t n, int parts, int tid, std::size_t* begin, std::size_t* end) {
  const std::size_t p = static_cast<std::size_t>(parts), t = static_cast<std::size_t>(tid);
  const std::size_t base = n / p, extra = n % p;
  *begin = t * base + std::min(t, extra);
  *end = *begin + base + (t < extra ? 1 : 0);
}

void WorkerPool::ParallelFor(std::size_t n, FunctionRef<void(std::size_t, std::size_t, int)> fn) {
  if (n == 0) return;
  ForEachThread([&](int tid) {
    std::size_t b, e;
    Split(n, size(), tid, &b, &e);
    if (b < e) fn(b, e, tid);
  });
}

void WorkerPool::Barrier() {
  if (size() == 1) return;
  // Read the generation before arriving: it cannot advance until we have arrived.
  const uint32_t gen = barrier_gen_.Load();
  // acq_rel: the last arriver acquires every other arriver's prior writes (then releases them
  // all through Publish); earlier arrivers release theirs here.
  if (barrier_arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == size()) {
    // relaxed: ordered before the waiters' next arrival by the Publish below (release) and
    // their WaitAtLeast (acquire).
    barrier_arrived_.store(0, std::memory_order_relaxed);
    barrier_gen_.Publish(gen + 1);
  } else {
    barrier_gen_.WaitAtLeast(gen + 1);
  }
}

int WorkerPool::ThisThreadId() const { return tl_pool == this ? tl_tid : -1; }

void WorkerPool::RecordError(std::exception_ptr e) {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (!job_error_) job_error_ = e;
}

void WorkerPool::RethrowError() {
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    err = job_error_;
    job_error_ = nullptr;
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace cputrain
