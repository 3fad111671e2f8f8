// train/run_lock: one writer per out_dir. The writer process holds an exclusive flock on
// out_dir/.lock for the whole run, with its pid written inside; the kernel drops the lock when
// the process ends however it ends (kill -9 included), so a stale lock never blocks a restart.
#pragma once

#include <optional>
#include <string>

namespace cputrain::train {

class RunLock {
 public:
  // Takes the lock or throws InputError naming the pid that holds it.
  explicit RunLock(const std::string& out_dir);
  // The pid (as the lock file says it; "unknown" if it says nothing) of another process that
  // holds out_dir's lock, or nullopt. Creates nothing: for a command that checks before it
  // starts any work, naming out_dir by its own flag (the constructor names train.out_dir).
  static std::optional<std::string> Holder(const std::string& out_dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace cputrain::train
