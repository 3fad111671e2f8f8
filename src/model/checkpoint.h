// model.bin (docs/formats.md). Two headers of 256 int32, then the family's tensors as fp32 in
// tensor-major order (each tensor's L copies together, tensors in the family's table order,
// params.h), vocabulary tensors with their Vp padded rows:
//  - GPT-2: llm.c's format — [0] magic 20240326, [1] version 3 (fp32) or 5 (llm.c's bf16: read,
//    widened to fp32; never written), [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp. Checkpoints
//    written here load in llm.c and its PyTorch scripts, and theirs load here.
//  - every other family: [0] magic 20261125, [1] version 2, [2] n, then n bytes of JSON from
//    byte 12: the whole Shape (family, dimensions, norm eps, rope, tied head; model/shape.h);
//    after the tensors, a uint32 CRC32C of every byte before it (as state.bin's trailer), so
//    that an edited header or a flipped bit is refused without a state.bin beside the file.
//    Version 1 (no CRC) is still read.
#pragma once

#include <optional>
#include <string>

#include "common/files.h"
#include "model/params.h"

namespace cputrain::model {

inline constexpr int kCheckpointMagic = 20240326;
inline constexpr int kCheckpointVersion = 3;      // fp32: the one we write
inline constexpr int kCheckpointVersionBf16 = 5;  // llm.c's bf16 parameters: loaded as fp32
inline constexpr int kFamilyCheckpointMagic = 20261125;
inline constexpr int kFamilyCheckpointVersion = 2;           // with its CRC32C trailer
inline constexpr int kFamilyCheckpointVersionUnchecked = 1;  // without: read, never written

// Both readers also take a Hugging Face GPT-2 directory (config.json + model.safetensors,
// model/hf.h) in place of a model.bin file.
//
// Reads and validates the header: magic, version, a sane shape, and a file size that matches
// it. Throws InputError naming the file, what is wrong, and a fix-it hint.
// head: as ReadHfShape's (an encoder directory read for a task); our files record their head.
Shape ReadCheckpointShape(const std::string& path, std::optional<HeadSpec> head = std::nullopt);

// Loads the parameters into `params` (layout.total() floats, flat layer-major layout); a
// version-5 file's bf16 values are widened exactly to fp32 (the master weights). The one load
// path of every command (train's resume and model.init_from, eval, generate, export), with the
// one set of checks, each an InputError naming the file: the file's shape must equal
// layout.shape(); a model.bin whose directory holds a state.bin recording its checksum
// (model/checkpoint_path.h) must match it; every parameter must be finite ("parameter N
// (tensor qkvw, layer 3, element 17) is nan"), for Hugging Face directories too.
// head_seed: for a Hugging Face encoder checkpoint without the task head (hf.h, LoadHf).
void LoadCheckpoint(const std::string& path, const ParamLayout& layout, float* params,
                    uint64_t head_seed = 0);
// The same, telling `done` of each tensor copy once it is complete and checked (params.h,
// TensorDone): a Hugging Face directory's as it is read, layer by layer (at most one tensor's
// parts pending); our own files' after the whole file is read and checked.
void LoadCheckpoint(const std::string& path, const ParamLayout& layout, float* params,
                    uint64_t head_seed, TensorDone done);

// Throws the InputError LoadCheckpoint throws if `got`, the digest of the model.bin at `path`,
// differs from the one the state.bin beside it records; nothing if it records none.
void CheckModelDigest(const std::string& path, const FileDigest& got);

// Writes params atomically: temporary file, fsync, rename (common/files.h). Returns the written
// file's digest, for the state.bin beside it.
FileDigest SaveCheckpoint(const std::string& path, const ParamLayout& layout, const float* params);

}  // namespace cputrain::model
