#include "train/run_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/error.h"
#include "common/files.h"

namespace cputrain::train {
namespace {

// The pid a lock's holder wrote into it, or "unknown".
std::string HolderPid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  return n > 0 ? std::string(buf, std::strcspn(buf, "\n")) : "unknown";
}

}  // namespace

std::optional<std::string> RunLock::Holder(const std::string& out_dir) {
  // flock needs no write access; a missing .lock (or out_dir) is a lock nobody holds.
  const int fd = ::open((out_dir + "/.lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> pid;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) pid = HolderPid(fd);
  ::close(fd);  // releases the probe's lock, if it got it
  return pid;
}

RunLock::RunLock(const std::string& out_dir) {
  const std::string path = out_dir + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    ThrowWriteError(fmt::format("cannot open '{}': {}", path, std::strerror(err)), err, path,
                    "check free disk space in train.out_dir");
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string pid = HolderPid(fd_);
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) {
      throw RuntimeError(fmt::format("locking '{}' failed: {}", path, std::strerror(err)));
    }
    throw InputError(
        fmt::format("train.out_dir '{}' is in use by another run (pid {})", out_dir, pid),
        "wait for that run to end, stop it, or choose another train.out_dir");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // The lock holds regardless; the pid is only for the message of a second run.
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace cputrain::train
