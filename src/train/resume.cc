#include "train/resume.h"

#include <fmt/format.h>

#include <filesystem>

#include "comm/distributed.h"
#include "common/error.h"
#include "model/checkpoint_path.h"

namespace cputrain::train {
namespace fs = std::filesystem;
namespace {

std::string AbsolutePath(const std::string& p) {
  std::error_code ec;
  fs::path a = fs::weakly_canonical(fs::absolute(p), ec);
  return ec ? fs::absolute(p).lexically_normal().string() : a.string();
}

std::vector<ShardRecord> Shards(const TokenWindows& train) {
  std::vector<ShardRecord> v;
  for (std::size_t i = 0; i < train.shard_count(); ++i)
    v.push_back({AbsolutePath(train.shard(i).path()), train.shard(i).size()});
  return v;
}

std::string Describe(const std::vector<ShardRecord>& shards) {
  if (shards.size() == 1) return fmt::format("{} ({} tokens)", shards[0].path, shards[0].tokens);
  uint64_t tokens = 0;
  for (const ShardRecord& r : shards) tokens += r.tokens;
  return fmt::format("{} shards from {} ({} tokens)", shards.size(),
                     shards.empty() ? "" : shards[0].path, tokens);
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

void CheckResumable(const ResumePoint& from, const Config& cfg, const model::Shape& shape,
                    const TokenWindows& train) {
  const model::Shape& s = from.state.shape;
  CheckInt(from, "model.layers", s.L, shape.L);
  CheckInt(from, "model.channels", s.C, shape.C);
  CheckInt(from, "model.heads", s.NH, shape.NH);
  CheckInt(from, "model.vocab_size", s.V, shape.V);
  CheckInt(from, "model.max_seq_len", s.maxT, shape.maxT);
  CheckInt(from, "data.batch_size", from.state.batch_size, cfg.data.batch_size);
  CheckInt(from, "data.seq_len", from.state.seq_len, cfg.data.seq_len);
  const std::vector<ShardRecord> now = Shards(train);
  if (now != from.state.shards) {
    // The first shard that differs, or the count, says what changed.
    std::size_t i = 0;
    while (i < now.size() && i < from.state.shards.size() && now[i] == from.state.shards[i]) ++i;
    std::string was = Describe(from.state.shards), is = Describe(now);
    if (i < now.size() && i < from.state.shards.size()) {
      const ShardRecord &a = from.state.shards[i], &b = now[i];
      was = fmt::format("{} ({} tokens)", a.path, a.tokens);
      is = fmt::format("{} ({} tokens{})", b.path, b.tokens,
                       a.path == b.path ? ": the file changed" : "");
    }
    Incompatible(from, "data.train", was, is);
  }
  if (from.state.shuffle != cfg.data.shuffle) {
    Incompatible(from, "data.shuffle", from.state.shuffle ? "true" : "false",
                 cfg.data.shuffle ? "true" : "false");
  }
  const uint64_t seed = cfg.data.Seed(cfg.model.seed);
  if (cfg.data.shuffle && seed != from.state.data_seed) {
    Incompatible(from, "data.seed", std::to_string(from.state.data_seed), std::to_string(seed));
  }
}

TrainState StateAt(const Config& cfg, const model::Shape& shape, int step, int skipped_steps,
                   const TokenWindows& train, DataPosition pos, double lr) {
  TrainState s;
  s.step = step;
  s.skipped_steps = skipped_steps;
  s.next_window = pos.next_window;
  s.epoch = pos.next_window / train.windows();
  s.shuffle = cfg.data.shuffle;
  s.data_seed = cfg.data.Seed(cfg.model.seed);
  s.tokens = pos.tokens;
  s.seed = cfg.model.seed;
  const std::string yaml = ConfigToYaml(cfg);
  s.config_hash = comm::Hash64(yaml.data(), yaml.size());
  s.lr = lr;
  s.shape = shape;
  s.shards = Shards(train);
  s.batch_size = cfg.data.batch_size;
  s.seq_len = cfg.data.seq_len;
  return s;
}

}  // namespace cputrain::train
