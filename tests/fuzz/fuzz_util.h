// Helpers shared by the fuzz targets (docs/fuzzing.md).
//
// The readers under test take a path (the checkpoint reader, TokenFile, hwloc's XML loader), so a
// target hands them its input as an anonymous in-memory file (memfd) named by
// /proc/self/fd/N: a regular file to stat, fopen, mmap and hwloc alike, with no disk I/O and
// nothing left behind when the target crashes.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace cputrain::fuzz {

class MemFile {
 public:
  MemFile(const uint8_t* data, std::size_t size) {
    fd_ = ::memfd_create("cputrain-fuzz", MFD_CLOEXEC);
    if (fd_ < 0) std::abort();  // not a finding about the input: the harness cannot run
    std::size_t done = 0;
    while (done < size) {
      ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<std::size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// Consumes bytes from the front of the input, 0 once it is used up (as libFuzzer's
// FuzzedDataProvider, which GCC's replay build does not have).
class Bytes {
 public:
  Bytes(const uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  uint8_t Take() {
    if (size_ == 0) return 0;
    --size_;
    return *data_++;
  }
  const uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  const uint8_t* data_;
  std::size_t size_;
};

}  // namespace cputrain::fuzz
