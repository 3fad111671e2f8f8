#include "train/checkpoint_dir.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>

#include "common/error.h"
#include "common/files.h"
#include "model/checkpoint.h"
#include "model/checkpoint_path.h"
#include "model/peft.h"

namespace cputrain::train {
namespace fs = std::filesystem;
namespace {

void RenameOrThrow(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) {
    ThrowWriteError(
        fmt::format("renaming '{}' to '{}' failed: {}", from.string(), to.string(), ec.message()),
        ec.value(), to.string(), "check the file system of train.out_dir");
  }
}

void RemoveAll(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);  // best effort: a leftover is removed again at the next start
}

// A step directory is first renamed to a temporary name, then deleted: a process killed half-way
// through the deletion leaves a temporary (removed at the next start), never a step directory
// with one file missing that nothing would ever list or delete.
void RemoveStepDir(const fs::path& dir) {
  const fs::path doomed = fmt::format("{}.old.tmp.{}", dir.string(), ::getpid());
  std::error_code ec;
  fs::rename(dir, doomed, ec);
  RemoveAll(ec ? dir : doomed);
}

}  // namespace

std::string SaveCheckpointDir(const std::string& out_dir, const CheckpointContents& c, int keep) {
  const fs::path root(out_dir);
  const fs::path final_dir = root / model::StepDirName(c.state.step);
  const fs::path tmp_dir = fmt::format("{}.tmp.{}", final_dir.string(), ::getpid());
  RemoveAll(tmp_dir);
  MakeDirs(tmp_dir.string());
  try {
    FileDigest model;
    if (c.lora) {
      model::WriteAdapter(tmp_dir.string(), *c.lora, c.params, c.base_model);
      static const InputKind kAdapter{"adapter", "an adapter_model.safetensors file",
                                      kMaxCheckpointBytes, "check train.out_dir"};
      model = DigestFile((tmp_dir / model::kAdapterFile).string(), kAdapter);
    } else {
      model = model::SaveCheckpoint((tmp_dir / model::kModelFile).string(), *c.layout, c.params);
    }
    WriteTrainState((tmp_dir / model::kStateFile).string(), c.state, c.optimizer, model);
  } catch (...) {
    RemoveAll(tmp_dir);  // the previous checkpoint and `latest` were never touched
    throw;
  }
  std::error_code ec;
  if (fs::exists(final_dir, ec)) RemoveStepDir(final_dir);  // an abandoned continuation's
  RenameOrThrow(tmp_dir, final_dir);
  SyncDir((root / model::kCheckpointsDir).string());
  WriteFileAtomic((root / model::kLatestFile).string(), model::StepDirName(c.state.step) + "\n");
  if (keep > 0) {
    auto all = model::ListCheckpoints(out_dir);
    for (std::size_t i = 0; i + keep < all.size(); ++i) RemoveStepDir(all[i].second);
  }
  return final_dir.string();
}

void RemoveTemporaries(const std::string& out_dir) {
  const fs::path root(out_dir);
  std::error_code ec;
  for (const fs::path& dir : {root, root / model::kCheckpointsDir}) {
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
      if (IsTemporary(e.path().string())) {
        RemoveAll(e.path());
      } else if (dir != root && e.is_directory(ec)) {
        for (const fs::directory_entry& f : fs::directory_iterator(e.path(), ec)) {
          if (IsTemporary(f.path().string())) RemoveAll(f.path());
        }
      }
    }
  }
}

void RemoveCheckpointsAfter(const std::string& out_dir, int step) {
  bool removed = false;
  // Every step directory, complete or not: one a resume skipped as damaged goes too.
  for (const auto& [s, dir] : model::ListStepDirs(out_dir)) {
    if (s > step) RemoveStepDir(dir);
    removed |= s > step;
  }
  if (!removed) return;
  // `latest` named one of them: point it at the newest left (readers fall back to that anyway).
  const auto left = model::ListCheckpoints(out_dir);
  const fs::path latest = fs::path(out_dir) / model::kLatestFile;
  if (left.empty()) {
    RemoveAll(latest);
  } else {
    WriteFileAtomic(latest.string(), model::StepDirName(left.back().first) + "\n");
  }
}

}  // namespace cputrain::train
