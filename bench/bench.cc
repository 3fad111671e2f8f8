#include "bench/bench.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

#include "common/error.h"

namespace cputrain::bench {

void Report::WriteJson(const std::string& path) const {
  std::ofstream out(path);
  if (!out) throw RuntimeError(fmt::format("cannot write the benchmark records to '{}'", path));
  out << records_.dump(2) << "\n";
  out.close();
  if (!out) throw RuntimeError(fmt::format("error while writing '{}'", path));
}

double Median(std::vector<double> v) {
  CPUTRAIN_CHECK(!v.empty(), "Median of no values");
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lo + hi) / 2;
}

std::string FormatBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return v == static_cast<double>(static_cast<uint64_t>(v))
             ? fmt::format("{} {}", v, kUnits[u])
             : fmt::format("{:.1f} {}", v, kUnits[u]);
}

std::string FormatSeconds(double s) {
  if (s < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  if (s < 1) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.2f} s", s);
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

MappedBuffer::MappedBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  data_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data_ == MAP_FAILED) {
    data_ = nullptr;
    throw RuntimeError(fmt::format("cannot map {} for a benchmark buffer: {}", FormatBytes(bytes),
                                   std::strerror(errno)));
  }
  // Advice only: with transparent huge pages in "madvise" mode this is what turns them on; if
  // the kernel refuses, the buffer works with 4 KiB pages (first touch is just slower).
  madvise(data_, bytes, MADV_HUGEPAGE);
}

MappedBuffer::~MappedBuffer() {
  if (data_ != nullptr) munmap(data_, bytes_);
}

MappedBuffer::MappedBuffer(MappedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

MappedBuffer& MappedBuffer::operator=(MappedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, bytes_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

}  // namespace cputrain::bench
