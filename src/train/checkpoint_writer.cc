#include "train/checkpoint_writer.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "common/error.h"
#include "model/checkpoint_path.h"

namespace cputrain::train {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Runs fn(b, e) over [0, n) split among up to CopyThreads() threads (at least 32 MB of floats
// each): one thread copies ~10 GB/s at best, and the stall a save costs is its copy.
template <typename Fn>
void ParallelFor(std::size_t n, Fn fn) {
  constexpr std::size_t kMinFloats = std::size_t{8} << 20;
  const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
  const std::size_t t = std::clamp<std::size_t>(n / kMinFloats, 1, threads);
  const std::size_t chunk = (n + t - 1) / t;
  std::vector<std::thread> pool;
  for (std::size_t i = 1; i < t; ++i) {
    const std::size_t b = std::min(n, i * chunk), e = std::min(n, b + chunk);
    pool.emplace_back([=] { fn(b, e); });
  }
  fn(0, std::min(n, chunk));
  for (auto& th : pool) th.join();
}

}  // namespace

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

CheckpointWriter::Buffer::~Buffer() { Unmap(); }

void CheckpointWriter::Buffer::Unmap() {
  if (data) munmap(data, floats * sizeof(float));
  data = nullptr;
  floats = 0;
}

double CheckpointWriter::Reserve(std::size_t floats) {
  const auto t0 = std::chrono::steady_clock::now();
  Grow(floats);
  return SecondsSince(t0);
}

void CheckpointWriter::Grow(std::size_t floats) {
  if (floats <= snap_.floats) return;
  Wait();
  snap_.Unmap();
  void* p = mmap(nullptr, floats * sizeof(float), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw RuntimeError(fmt::format("cannot map {:.2f} GB for the checkpoint snapshot: {}",
                                   floats * sizeof(float) / 1e9, std::strerror(errno)),
                       "free memory, or set train.checkpoint_every: 0 (saves only at the end, "
                       "written in place without a snapshot)");
  }
  snap_.data = static_cast<float*>(p);
  snap_.floats = floats;
  // Fault every page in now, in parallel, rather than during the first save's copy.
  float* d = snap_.data;
  ParallelFor(floats, [d](std::size_t b, std::size_t e) { std::fill(d + b, d + e, 0.f); });
}

std::string CheckpointWriter::SaveInBackground(const CheckpointContents& c) {
  Wait();
  const std::size_t n = c.layout->total();
  const std::size_t floats = n + c.optimizer.floats();
  Grow(floats);
  float* at = snap_.data;
  const auto copy = [&at](const float* src, std::size_t len) {
    float* d = at;
    ParallelFor(len,
                [d, src](std::size_t b, std::size_t e) { std::copy(src + b, src + e, d + b); });
    at += len;
    return std::span<const float>(d, len);
  };
  snapshot_ = {c.layout,    copy(c.params, n).data(), c.state, {c.optimizer.name, {}}, c.lora,
               c.base_model};
  for (const OptimizerState::Group& g : c.optimizer.groups) {
    snapshot_.optimizer.groups.push_back({g.slots, {}});
    for (auto part : g.data) {
      snapshot_.optimizer.groups.back().data.push_back(copy(part.data(), part.size()));
    }
  }
  snap_used_ = floats;
  dir_ = out_dir_ + "/" + model::StepDirName(c.state.step);
  thread_ = std::thread([this] {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      SaveCheckpointDir(out_dir_, snapshot_, keep_);
    } catch (...) {
      error_ = std::current_exception();
      write_secs_ = SecondsSince(t0);
      failed_.store(true, std::memory_order_release);  // error_ first (see failed())
      return;
    }
    write_secs_ = SecondsSince(t0);
  });
  return dir_;
}

std::string CheckpointWriter::Save(const CheckpointContents& c) {
  Wait();
  return SaveCheckpointDir(out_dir_, c, keep_);
}

std::string CheckpointWriter::Wait() {
  if (!thread_.joinable()) return "";
  thread_.join();
  failed_.store(false, std::memory_order_relaxed);  // the thread has ended: no one else reads it
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  const double mb = snap_used_ * sizeof(float) / 1e6;
  return fmt::format("saved {} in the background in {:.2f} s ({:.0f} MB/s)", dir_, write_secs_,
                     mb / write_secs_);
}

}  // namespace cputrain::train
