// Where a run's checkpoints live (docs/formats.md, "Checkpoint directories"):
//
//   out_dir/checkpoints/step_00000120/model.bin   llm.c v3 weights (model/checkpoint.h)
//   out_dir/checkpoints/step_00000120/state.bin   AdamW moments, step, data position (train/)
//   out_dir/latest                                "checkpoints/step_00000120\n", written last
//
// A step directory is built under a temporary name and renamed into place once both files are
// fsynced, so a directory named step_N is always complete. Every consumer of weights (generate,
// model.init_from, train.resume) accepts a model.bin file, a step directory or an out_dir;
// generate and model.init_from also take a Hugging Face GPT-2 directory.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cputrain::model {

inline constexpr const char* kCheckpointsDir = "checkpoints";
inline constexpr const char* kLatestFile = "latest";
inline constexpr const char* kModelFile = "model.bin";
inline constexpr const char* kStateFile = "state.bin";

// "checkpoints/step_00000120": a step directory's path relative to out_dir.
std::string StepDirName(int step);

// The complete step directories under out_dir/checkpoints, as (step, path), oldest first.
std::vector<std::pair<int, std::string>> ListCheckpoints(const std::string& out_dir);

// The newest complete step directory of out_dir: the one `latest` names if it exists, else the
// highest step directory; nullopt if there is none.
std::optional<std::string> LatestCheckpoint(const std::string& out_dir);

// A step directory for `path`: a step directory itself (it holds model.bin), or an out_dir's
// newest. Throws InputError naming `path` if it is neither.
std::string ResolveCheckpointDir(const std::string& path);

// The weights for `path`: a model.bin-style file as given, a Hugging Face GPT-2 directory
// (model/hf.h) as given, else the model.bin of
// ResolveCheckpointDir(path) when `path` is a directory. Throws InputError naming `path` if a
// directory holds none.
std::string ResolveModelFile(const std::string& path);

}  // namespace cputrain::model
