#include "train/resume.h"

#include <fmt/format.h>

#include <filesystem>

#include "common/error.h"
#include "model/checkpoint_path.h"
#include "train/distributed.h"

namespace cputrain::train {
namespace fs = std::filesystem;
namespace {

std::string AbsolutePath(const std::string& p) {
  std::error_code ec;
  fs::path a = fs::weakly_canonical(fs::absolute(p), ec);
  return ec ? fs::absolute(p).lexically_normal().string() : a.string();
}

uint64_t FileBytes(const std::string& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

[[noreturn]] void Incompatible(const ResumePoint& from, const std::string& key,
                               const std::string& was, const std::string& now) {
  throw InputError(
      fmt::format("{} is {} but the checkpoint '{}' was trained with {}", key, now, from.dir, was),
      fmt::format("set {} back to {} to resume, or start a new run: another train.out_dir, or "
                  "train.resume: never",
                  key, was));
}

void CheckInt(const ResumePoint& from, const char* key, long long was, long long now) {
  if (was != now) Incompatible(from, key, std::to_string(was), std::to_string(now));
}

bool HoldsRun(const std::string& out_dir) {
  return !model::ListCheckpoints(out_dir).empty() ||
         FileBytes((fs::path(out_dir) / "metrics.jsonl").string()) > 0;
}

}  // namespace

std::optional<ResumePoint> FindResumePoint(const Config& cfg, bool writer) {
  const std::string& mode = cfg.train.resume;
  const std::string& out = cfg.train.out_dir;
  std::optional<std::string> dir;
  if (mode == "never") {
    if (writer && HoldsRun(out)) {
      throw InputError(
          fmt::format("train.out_dir '{}' already holds a run (checkpoints or metrics.jsonl) and "
                      "train.resume is never",
                      out),
          "choose a new train.out_dir, remove the old one, or set train.resume: auto to "
          "continue it");
    }
  } else if (mode == "auto") {
    dir = model::LatestCheckpoint(out);
  } else {
    dir = model::ResolveCheckpointDir(mode);
  }
  if (!dir) return std::nullopt;
  TrainStateReader reader((fs::path(*dir) / model::kStateFile).string());
  return ResumePoint{*dir, reader.state()};
}

void CheckResumable(const ResumePoint& from, const Config& cfg, const model::Shape& shape) {
  const model::Shape& s = from.state.shape;
  CheckInt(from, "model.layers", s.L, shape.L);
  CheckInt(from, "model.channels", s.C, shape.C);
  CheckInt(from, "model.heads", s.NH, shape.NH);
  CheckInt(from, "model.vocab_size", s.V, shape.V);
  CheckInt(from, "model.max_seq_len", s.maxT, shape.maxT);
  CheckInt(from, "data.batch_size", from.state.batch_size, cfg.data.batch_size);
  CheckInt(from, "data.seq_len", from.state.seq_len, cfg.data.seq_len);
  const std::string train = AbsolutePath(cfg.data.train);
  if (train != from.state.data_train)
    Incompatible(from, "data.train", from.state.data_train, train);
  const uint64_t bytes = FileBytes(cfg.data.train);
  if (bytes != from.state.data_train_bytes) {
    Incompatible(from, "data.train",
                 fmt::format("{} ({} bytes)", from.state.data_train, from.state.data_train_bytes),
                 fmt::format("{} ({} bytes: the file changed)", train, bytes));
  }
}

TrainState StateAt(const Config& cfg, const model::Shape& shape, int step, int skipped_steps,
                   uint64_t windows, double lr) {
  TrainState s;
  s.step = step;
  s.skipped_steps = skipped_steps;
  s.next_window = windows ? static_cast<uint64_t>(step) % windows : 0;
  s.seed = cfg.model.seed;
  const std::string yaml = ConfigToYaml(cfg);
  s.config_hash = Hash64(yaml.data(), yaml.size());
  s.lr = lr;
  s.shape = shape;
  s.data_train = AbsolutePath(cfg.data.train);
  s.data_train_bytes = FileBytes(cfg.data.train);
  s.batch_size = cfg.data.batch_size;
  s.seq_len = cfg.data.seq_len;
  return s;
}

}  // namespace cputrain::train
