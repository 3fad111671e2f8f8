// The MPI bridge over Open MPI (bridge.h says what it does); internal to mpi/, built when
// CPUTRAIN_MPI finds an MPI library.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mpi/bridge.h"

namespace cputrain::mpi {

class OmpiBridge final : public Bridge {
 public:
  // Initializes MPI with MPI_THREAD_MULTIPLE and starts the watchdog (Bridge::Start decided
  // that the bridge is on). Throws RuntimeError if MPI cannot start or lacks
  // MPI_THREAD_MULTIPLE.
  static std::unique_ptr<Bridge> Start(const MpiConfig& config, ExitProcess exit_process);
  // Without Finish() (an error path), aborts the job: the other ranks must not wait for us.
  ~OmpiBridge() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void CheckConsistent(uint64_t config_hash, uint64_t model_hash, int groups) override;
  double SumAcrossRanks(double v) override;
  void AllreduceShard(int group, float* data, std::size_t n) override;
  std::vector<std::string> Gather(const std::string& text) override;
  void SetStep(int step) override;

  // Collective: every rank calls it at the end of a successful run. Stops the watchdog and
  // finalizes MPI.
  void Finish() override;
  // Ends the whole job now with this exit code (MPI_Abort, then exit_process); `why` is
  // printed first.
  [[noreturn]] void Abort(int exit_code, const std::string& why) override;

 private:
  OmpiBridge() = default;
  void WatchdogLoop();
  void WarnIfLongWait(double now, const std::vector<int>& peer_step, double* warned_wait_since);
  // Marks the calling thread as blocked in an inter-node call (slot: group index, or the last
  // slot for the main thread), for the watchdog's diagnosis.
  void EnterWait(int slot);
  void LeaveWait(int slot);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
  double watchdog_seconds_ = 60;
  ExitProcess exit_process_ = nullptr;
  std::atomic<int> step_{0};
  std::atomic<bool> stop_watchdog_{false};
  std::thread watchdog_;
  bool finished_ = false;
};

}  // namespace cputrain::mpi
