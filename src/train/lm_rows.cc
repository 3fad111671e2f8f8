#include <fmt/format.h>

#include <filesystem>

#include "train/batches.h"

namespace cputrain::train {

LmRows::LmRows(TokenWindows windows, bool shuffle, uint64_t seed)
    : windows_(std::move(windows)), order_(windows_.windows(), shuffle, seed) {}

void LmRows::Plan(uint64_t p, int k) {
  planned_.resize(static_cast<std::size_t>(k));
  for (int j = 0; j < k; ++j) planned_[static_cast<std::size_t>(j)] = order_.At(p + j);
}

void LmRows::LoadRows(std::size_t j, int row0, int rows, model::Activations& a) const {
  windows_.LoadRows(planned_.at(j), row0, rows, a.inputs, a.targets);
}

ShardRecord RecordOf(const std::string& path, uint64_t size) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p = fs::absolute(path);
  const fs::path c = fs::weakly_canonical(p, ec);
  return {ec ? p.lexically_normal().string() : c.string(), size};
}

std::vector<ShardRecord> LmRows::Identity() const {
  std::vector<ShardRecord> v;
  for (std::size_t i = 0; i < windows_.shard_count(); ++i)
    v.push_back(RecordOf(windows_.shard(i).path(), windows_.shard(i).size()));
  return v;
}

std::string LmRows::Describe() const {
  return fmt::format("{} train windows in {} shard(s)", windows_.windows(), windows_.shard_count());
}

}  // namespace cputrain::train
