#include "train/checkpoint_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "model/checkpoint_path.h"

namespace cputrain::train {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Concatenates the parts into `out` (reusing its memory from the previous save).
std::span<const float> Copy(const std::vector<std::span<const float>>& parts,
                            std::vector<float>& out) {
  std::size_t n = 0;
  for (auto p : parts) n += p.size();
  out.resize(n);
  std::size_t at = 0;
  for (auto p : parts) at = std::copy(p.begin(), p.end(), out.begin() + at) - out.begin();
  return {out.data(), out.size()};
}

}  // namespace

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

std::string CheckpointWriter::SaveInBackground(const CheckpointContents& c) {
  Wait();
  params_.assign(c.params, c.params + c.layout->total());
  snapshot_ = {c.layout, params_.data(), c.state, {Copy(c.m, m_)}, {Copy(c.v, v_)}};
  dir_ = out_dir_ + "/" + model::StepDirName(c.state.step);
  thread_ = std::thread([this] {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      SaveCheckpointDir(out_dir_, snapshot_, keep_);
    } catch (...) {
      error_ = std::current_exception();
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
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  const double mb = (params_.size() + m_.size() + v_.size()) * sizeof(float) / 1e6;
  return fmt::format("saved {} in the background in {:.2f} s ({:.0f} MB/s)", dir_, write_secs_,
                     mb / write_secs_);
}

}  // namespace cputrain::train
