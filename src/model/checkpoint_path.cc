#include "model/checkpoint_path.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "model/family.h"
#include "model/hf.h"

namespace cputrain::model {
namespace fs = std::filesystem;
namespace {

// step_00000120 -> 120; anything else (a temporary "step_00000120.tmp.42") -> -1.
int ParseStepDir(const std::string& name) {
  constexpr std::string_view kPrefix = "step_";
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) return -1;
  const std::string digits = name.substr(kPrefix.size());
  if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::atoi(digits.c_str());
}

bool IsStepDir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(StepModelFile(dir.string()), ec) &&
         fs::is_regular_file(dir / kStateFile, ec);
}

}  // namespace

std::string StepModelFile(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  if (!fs::is_regular_file(d / kModelFile, ec) && fs::is_regular_file(d / kAdapterFile, ec))
    return (d / kAdapterFile).string();
  return (d / kModelFile).string();
}

bool IsAdapterDir(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / kAdapterConfigFile, ec);
}

std::string StepDirName(int step) { return fmt::format("{}/step_{:08d}", kCheckpointsDir, step); }

std::optional<StateTrailer> ReadStateTrailer(const std::string& state_path) {
  std::ifstream in(state_path, std::ios::binary);
  char header[12] = {};
  if (!in.read(header, sizeof header) || std::memcmp(header, kStateMagic, 8) != 0) {
    return std::nullopt;
  }
  uint32_t version = 0;
  std::memcpy(&version, header + 8, 4);
  if (version < 3 || !in.seekg(-static_cast<std::streamoff>(kStateTrailerBytes), std::ios::end)) {
    return std::nullopt;
  }
  unsigned char t[kStateTrailerBytes];
  if (!in.read(reinterpret_cast<char*>(t), sizeof t)) return std::nullopt;
  StateTrailer r;
  std::memcpy(&r.model.bytes, t, 8);
  std::memcpy(&r.model.crc32c, t + 8, 4);
  std::memcpy(&r.state_crc32c, t + 12, 4);
  return r;
}

std::vector<std::pair<int, std::string>> ListStepDirs(const std::string& out_dir) {
  std::vector<std::pair<int, std::string>> found;
  std::error_code ec;
  for (const fs::directory_entry& e :
       fs::directory_iterator(fs::path(out_dir) / kCheckpointsDir, ec)) {
    const int step = ParseStepDir(e.path().filename().string());
    if (step >= 0 && e.is_directory(ec)) found.emplace_back(step, e.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::vector<std::pair<int, std::string>> ListCheckpoints(const std::string& out_dir) {
  std::vector<std::pair<int, std::string>> found = ListStepDirs(out_dir);
  std::erase_if(found, [](const auto& d) { return !IsStepDir(d.second); });
  return found;
}

std::optional<int> LatestStep(const std::string& out_dir) {
  std::ifstream in(fs::path(out_dir) / kLatestFile);
  std::string rel;
  std::error_code ec;
  if (!in || !std::getline(in, rel) || !fs::is_directory(fs::path(out_dir) / rel, ec)) {
    return std::nullopt;
  }
  const int step = ParseStepDir(fs::path(rel).filename().string());
  if (step < 0 || rel != StepDirName(step)) return std::nullopt;
  return step;
}

std::optional<std::string> LatestCheckpoint(const std::string& out_dir) {
  std::ifstream in(fs::path(out_dir) / kLatestFile);
  std::string rel;
  if (in && std::getline(in, rel) && !rel.empty() && IsStepDir(fs::path(out_dir) / rel)) {
    return (fs::path(out_dir) / rel).string();
  }
  // `latest` missing (a run killed between the rename and its update) or damaged: the newest
  // step directory is complete all the same (it exists only once renamed).
  auto all = ListCheckpoints(out_dir);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

std::string ResolveCheckpointDir(const std::string& path) {
  std::error_code ec;
  if (IsStepDir(fs::path(path))) return path;
  if (fs::is_regular_file(fs::path(path) / kModelFile, ec)) return path;
  if (auto latest = LatestCheckpoint(path)) return *latest;
  throw InputError(
      fmt::format("'{}' is not a checkpoint: no model.bin in it and no complete checkpoint "
                  "under {}/{}",
                  path, path, kCheckpointsDir),
      "pass a model.bin file, a checkpoints/step_N directory or a training run's out_dir");
}

std::string ResolveModelFile(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path;  // a file: model/checkpoint.h checks it
  if (IsHfDir(path)) return path;                // config.json + model.safetensors
  if (IsAdapterDir(path)) {
    throw InputError(fmt::format("'{}' is a LoRA adapter, not a whole model", path),
                     "give the base model as the model and this directory as --adapter, or "
                     "merge them: cputrain-numa export --format hf --checkpoint BASE --adapter DIR "
                     "--merge -o OUT");
  }
  std::string dir;
  try {
    dir = ResolveCheckpointDir(path);
  } catch (const InputError& e) {  // weights (not a resume) may also come from Hugging Face
    throw InputError(e.what(), e.hint() +
                                   ", or a Hugging Face model directory (config.json + "
                                   "model.safetensors) of a family of " +
                                   FamilyNames());
  }
  if (IsAdapterDir(dir)) {
    throw InputError(
        fmt::format("'{}' holds a LoRA adapter ({}), not a whole model", path, dir),
        fmt::format(
            "give the base model as the model and {} as --adapter, or merge "
            "them: cputrain-numa export --format hf --checkpoint BASE --adapter {} --merge -o OUT",
            dir, dir));
  }
  return (fs::path(dir) / kModelFile).string();
}

}  // namespace cputrain::model
