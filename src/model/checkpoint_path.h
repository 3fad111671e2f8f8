// Where a run's checkpoints live (docs/formats.md, "Checkpoint directories"):
//
//   out_dir/checkpoints/step_00000120/model.bin   llm.c v3 weights (model/checkpoint.h)
//   out_dir/checkpoints/step_00000120/state.bin   AdamW moments, step, data position (train/)
//   out_dir/latest                                "checkpoints/step_00000120\n", written last
//
// A LoRA run's step directory holds the adapters in PEFT's format in model.bin's place
// (adapter_model.safetensors + adapter_config.json, whose base_model_name_or_path names the
// base; model/peft.h): it is itself an adapter directory that peft loads.
//
// A step directory is built under a temporary name and renamed into place once both files are
// fsynced, so a directory named step_N is always complete. Every consumer of weights (generate,
// model.init_from, train.resume) accepts a model.bin file, a step directory or an out_dir;
// generate and model.init_from also take a Hugging Face GPT-2 directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/files.h"

namespace cputrain::model {

inline constexpr const char* kCheckpointsDir = "checkpoints";
inline constexpr const char* kLatestFile = "latest";
inline constexpr const char* kModelFile = "model.bin";
inline constexpr const char* kStateFile = "state.bin";
inline constexpr const char* kAdapterFile = "adapter_model.safetensors";
inline constexpr const char* kAdapterConfigFile = "adapter_config.json";

// The weights file of step directory `dir`: its model.bin, or a LoRA run's adapter file when it
// has one and no model.bin (dir/model.bin if neither exists, for messages).
std::string StepModelFile(const std::string& dir);
// `dir` holds a PEFT adapter (adapter_config.json).
bool IsAdapterDir(const std::string& dir);

// state.bin's magic and version (train/train_state.h has its layout). Version 3 ends with a
// trailer holding the step directory's checksums (docs/formats.md, "Checksums"), kept in
// state.bin because model.bin keeps llm.c's layout:
//   uint64 model.bin's length, uint32 model.bin's CRC32C (the whole file),
//   uint32 the CRC32C of every byte of state.bin before this field.
inline constexpr char kStateMagic[8] = {'C', 'P', 'T', 'N', 'S', 'T', 'A', 'T'};
inline constexpr uint32_t kStateVersion = 4;
inline constexpr uint64_t kStateTrailerBytes = 16;

struct StateTrailer {
  FileDigest model;           // of the model.bin beside it
  uint32_t state_crc32c = 0;  // of state.bin's bytes [0, size - 4)
};

// The trailer of the state.bin at `state_path`; nullopt if there is none to read: no such file,
// not a state.bin, or a version before 3 (whose checkpoints carry no checksums).
std::optional<StateTrailer> ReadStateTrailer(const std::string& state_path);

// "checkpoints/step_00000120": a step directory's path relative to out_dir.
std::string StepDirName(int step);

// The complete step directories under out_dir/checkpoints, as (step, path), oldest first.
std::vector<std::pair<int, std::string>> ListCheckpoints(const std::string& out_dir);

// Every directory named step_N under out_dir/checkpoints, complete or not, oldest first.
std::vector<std::pair<int, std::string>> ListStepDirs(const std::string& out_dir);

// The step `latest` names, if it names one whose directory exists.
std::optional<int> LatestStep(const std::string& out_dir);

// The newest complete step directory of out_dir: the one `latest` names if it exists, else the
// highest step directory; nullopt if there is none.
std::optional<std::string> LatestCheckpoint(const std::string& out_dir);

// A step directory for `path`: a step directory itself (it holds model.bin or an adapter), or an
// out_dir's newest. Throws InputError naming `path` if it is neither.
std::string ResolveCheckpointDir(const std::string& path);

// The weights for `path`: a model.bin-style file as given, a Hugging Face GPT-2 directory
// (model/hf.h) as given, else the model.bin of
// ResolveCheckpointDir(path) when `path` is a directory. Throws InputError naming `path` if a
// directory holds none, or holds a LoRA adapter (the base and the adapter are given apart).
std::string ResolveModelFile(const std::string& path);

}  // namespace cputrain::model
