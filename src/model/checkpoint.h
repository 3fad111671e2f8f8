// llm.c's checkpoint format (docs/formats.md): 256 int32 header — [0] magic 20240326, [1]
// version 3 (fp32), [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp — then the 16 tensors as fp32
// in tensor-major order (wte, wpe, ln1w for all layers, ...). Checkpoints written here load in
// llm.c and its PyTorch scripts, and theirs load here.
#pragma once

#include <string>

#include "model/gpt2.h"

namespace cputrain::model {

inline constexpr int kCheckpointMagic = 20240326;
inline constexpr int kCheckpointVersion = 3;

// Both readers also take a Hugging Face GPT-2 directory (config.json + model.safetensors,
// model/hf_gpt2.h) in place of a model.bin file.
//
// Reads and validates the header: magic, version, a sane shape, and a file size that matches
// it. Throws InputError naming the file, what is wrong, and a fix-it hint.
Shape ReadCheckpointShape(const std::string& path);

// Loads the parameters into `params` (layout.total() floats, flat layer-major layout). The
// file's shape must equal layout.shape() (else InputError).
void LoadCheckpoint(const std::string& path, const ParamLayout& layout, float* params);

// Writes params atomically: temporary file, fsync, rename (common/files.h).
void SaveCheckpoint(const std::string& path, const ParamLayout& layout, const float* params);

}  // namespace cputrain::model
