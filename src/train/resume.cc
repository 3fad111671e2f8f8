#include "train/resume.h"

#include <fmt/format.h>

#include <filesystem>

#include "comm/distributed.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "model/checkpoint.h"
#include "model/checkpoint_path.h"

namespace cputrain::train {
namespace fs = std::filesystem;
namespace {

// unit: what the sizes count ("tokens", "features").
std::string Describe(const std::vector<ShardRecord>& shards, const char* unit) {
  if (shards.size() == 1) {
    return fmt::format("{} ({} {})", shards[0].path, shards[0].tokens, unit);
  }
  uint64_t tokens = 0;
  for (const ShardRecord& r : shards) tokens += r.tokens;
  return fmt::format("{} shards from {} ({} {})", shards.size(),
                     shards.empty() ? "" : shards[0].path, tokens, unit);
}

uint64_t FileBytes(const std::string& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

[[noreturn]] void Incompatible(const ResumePoint& from, const Names& names, const std::string& key,
                               const std::string& was, const std::string& now) {
  const std::string name = names.Key(key);
  throw InputError(
      fmt::format("{} is {} but the checkpoint '{}' was trained with {}", name, now, from.dir, was),
      fmt::format("set {} back to {} to resume, or {}", name, was, names.fresh_start));
}

void CheckInt(const ResumePoint& from, const Names& names, const char* key, long long was,
              long long now) {
  if (was != now) Incompatible(from, names, key, std::to_string(was), std::to_string(now));
}

bool HoldsRun(const std::string& out_dir) {
  return !model::ListCheckpoints(out_dir).empty() ||
         FileBytes((fs::path(out_dir) / "metrics.jsonl").string()) > 0;
}

// The step directories a resume from `out_dir` may start from, newest first: every step_N
// directory, complete or not (an incomplete one is reported, not silently passed over), up to
// the one `latest` names when it names one.
std::vector<std::string> Candidates(const std::string& out_dir) {
  const std::optional<int> latest = model::LatestStep(out_dir);
  std::vector<std::string> dirs;
  for (const auto& [step, dir] : model::ListStepDirs(out_dir)) {
    if (!latest || step <= *latest) dirs.insert(dirs.begin(), dir);
  }
  return dirs;
}

// Opens `dir`'s state.bin after checking the whole checkpoint: both files present, state.bin's
// and model.bin's checksums (a state.bin before version 3 records none). Throws InputError
// naming the file and what is wrong.
ResumePoint Verified(const std::string& dir) {
  const fs::path model = model::StepModelFile(dir), state = fs::path(dir) / model::kStateFile;
  std::error_code ec;
  for (const fs::path& f : {model, state}) {
    if (!fs::is_regular_file(f, ec)) {
      throw InputError(
          fmt::format("checkpoint '{}' is incomplete: it has no {}", dir, f.filename().string()),
          "a save writes both files before the directory gets its name: this one "
          "was changed since; resume from the checkpoint before it");
    }
  }
  TrainStateReader reader(state.string());
  reader.VerifyChecksum();
  if (reader.model_digest()) {
    static const InputKind kModel{"checkpoint", "a model.bin file", kMaxCheckpointBytes,
                                  "check train.resume"};
    model::CheckModelDigest(model.string(), DigestFile(model.string(), kModel));
  }
  return ResumePoint{dir, reader.state()};
}

// The newest of `dirs` that Verified accepts. A refused one ends the resume (exit 2) unless
// train.resume_fallback is set; then it is skipped with a warning naming it and why.
ResumePoint FirstGood(const std::vector<std::string>& dirs, const std::string& where, bool fallback,
                      const Names& names) {
  for (std::size_t i = 0; i < dirs.size(); ++i) {
    try {
      return Verified(dirs[i]);
    } catch (const InputError& e) {
      if (!fallback) {
        throw InputError(
            fmt::format("cannot resume from {}: {}", dirs[i], e.what()),
            i + 1 < dirs.size()
                ? fmt::format("{}; or resume from the newest good checkpoint before it (next: {}) "
                              "with {}",
                              e.hint(), dirs[i + 1], names.Key("train.resume_fallback"))
                : e.hint());
      }
      log::Warn("resume: skipping checkpoint {}: {}", dirs[i], e.what());
    }
  }
  throw InputError(
      fmt::format("no checkpoint of '{}' can be resumed from: all {} were skipped (above)", where,
                  dirs.size()),
      names.fresh_start);
}

}  // namespace

std::optional<ResumePoint> FindResumePoint(const Config& cfg, bool writer, const Names& names) {
  const std::string& mode = cfg.train.resume;
  const std::string& out = cfg.train.out_dir;
  const bool fallback = cfg.train.resume_fallback;
  if (mode == "never") {
    if (writer && HoldsRun(out)) {
      throw InputError(
          fmt::format("train.out_dir '{}' already holds a run (checkpoints or metrics.jsonl) and "
                      "train.resume is never",
                      out),
          "choose a new train.out_dir, remove the old one, or set train.resume: auto to "
          "continue it");
    }
    return std::nullopt;
  }
  if (mode == "auto") {
    const std::vector<std::string> dirs = Candidates(out);
    if (dirs.empty()) return std::nullopt;
    return FirstGood(dirs, out, fallback, names);
  }
  std::error_code ec;
  if (fs::exists(model::StepModelFile(mode), ec)) return FirstGood({mode}, mode, false, names);
  const std::vector<std::string> dirs = Candidates(mode);
  if (dirs.empty()) model::ResolveCheckpointDir(mode);  // throws: not a checkpoint
  return FirstGood(dirs, mode, fallback, names);
}

void CheckResumable(const ResumePoint& from, const Config& cfg, const model::Shape& shape,
                    const RowSource& train, const Names& names) {
  const model::Shape& s = from.state.shape;
  CheckInt(from, names, "model.layers", s.L, shape.L);
  CheckInt(from, names, "model.channels", s.C, shape.C);
  CheckInt(from, names, "model.heads", s.NH, shape.NH);
  CheckInt(from, names, "model.vocab_size", s.V, shape.V);
  CheckInt(from, names, "model.max_seq_len", s.maxT, shape.maxT);
  CheckInt(from, names, "data.batch_size", from.state.batch_size, cfg.data.batch_size);
  CheckInt(from, names, "data.seq_len", from.state.seq_len, cfg.data.seq_len);
  const std::vector<ShardRecord> now = train.Identity();
  if (now != from.state.shards) {
    // The first shard that differs, or the count, says what changed.
    std::size_t i = 0;
    while (i < now.size() && i < from.state.shards.size() && now[i] == from.state.shards[i]) ++i;
    const char* unit = train.unit();
    std::string was = Describe(from.state.shards, unit), is = Describe(now, unit);
    if (i < now.size() && i < from.state.shards.size()) {
      const ShardRecord &a = from.state.shards[i], &b = now[i];
      was = fmt::format("{} ({} {})", a.path, a.tokens, unit);
      is = fmt::format("{} ({} {}{})", b.path, b.tokens, unit,
                       a.path == b.path ? ": the file changed" : "");
    }
    Incompatible(from, names, "data.train", was, is);
  }
  if (from.state.shuffle != cfg.data.shuffle) {
    Incompatible(from, names, "data.shuffle", from.state.shuffle ? "true" : "false",
                 cfg.data.shuffle ? "true" : "false");
  }
  const uint64_t seed = cfg.data.Seed(cfg.model.seed);
  if (cfg.data.shuffle && seed != from.state.data_seed) {
    Incompatible(from, names, "data.seed", std::to_string(from.state.data_seed),
                 std::to_string(seed));
  }
}

TrainState StateAt(const Config& cfg, const model::Shape& shape, int step, int skipped_steps,
                   const RowSource& train, DataPosition pos, double lr) {
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
  s.shards = train.Identity();
  s.batch_size = cfg.data.batch_size;
  s.seq_len = cfg.data.seq_len;
  return s;
}

}  // namespace cputrain::train
