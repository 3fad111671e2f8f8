// train/run_lock: one writer per out_dir. The writer process holds an exclusive flock on
// out_dir/.lock for the whole run, with its pid written inside; the kernel drops the lock when
// the process ends however it ends (kill -9 included), so a stale lock never blocks a restart.
#pragma once

#include <string>

namespace cputrain::train {

class RunLock {
 public:
  // Takes the lock or throws InputError naming the pid that holds it.
  explicit RunLock(const std::string& out_dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace cputrain::train
