// train/train_state: state.bin, the half of a checkpoint that llm.c has no place for: the
// optimizer's state (its slots as whole-model vectors, whatever the ZeRO-1 sharding: any group
// count resumes any other's) and where the run stands — the step, the schedule and data
// positions, the seed, and what a resumed config must not change (model shape, data, batch).
// docs/formats.md documents the layout:
//
//   [0, 8)    magic "CPTNSTAT"
//   [8, 12)   uint32 version (4; 3, 2 and 1 are still read)   [12, 16) uint32 0
//   [16, 24)  uint64 meta_bytes        [24, 32) uint64 n
//   [32, 32 + meta_bytes)              meta: a JSON object (TrainState below; version 4 also
//                                      "optimizer": {"name", "slots": [{"name", "floats"}...]})
//   version 4: the slots' vectors back to back, n floats in all, in the meta's order;
//   versions 1-3: n floats in each of slots "m" and "v" (optim/optimizer.h:
//   kVersion3StateOptimizer) then (version 3 on) the 16-byte trailer of checksums
//   (model/checkpoint_path.h)
//
// All integers and floats little-endian; the file is exactly 32 + meta_bytes + 4 floats (+ 16)
// bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/files.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "train/rows.h"

namespace cputrain::train {

// One shard of data.train as the checkpoint saw it.

struct TrainState {
  int step = 0;           // updates applied or skipped so far: the next step is step + 1
  int skipped_steps = 0;  // steps skipped by train.on_nonfinite: skip_step (no update)
  // Data position: train windows read so far (all micro-batches of all steps, over epochs); the
  // next step reads from it. Version 1 stored step mod windows here (no shuffle then).
  uint64_t next_window = 0;
  uint64_t epoch = 0;        // next_window div windows: the epoch whose permutation comes next
  bool shuffle = false;      // data.shuffle
  uint64_t data_seed = 0;    // the shuffle's seed (data.seed, or model.seed)
  uint64_t tokens = 0;       // global tokens trained on so far
  uint64_t seed = 0;         // model.seed (the only randomness: the initial weights)
  uint64_t config_hash = 0;  // of the effective config that wrote it
  double lr = 0;             // the learning rate of step `step`
  model::Shape shape;
  std::vector<ShardRecord> shards;  // data.train, expanded, in order
  int batch_size = 0, seq_len = 0;
  // The kernels the run's products ran on (train/kernel_setup.h; null in files written before it
  // was recorded): a resume on the same machine runs the same ones.
  nlohmann::json kernels;
};

// The optimizer's state as the groups hold it (optim/optimizer.h): per group, in group order,
// its slots (names, whole-model lengths, pieces) and their buffers.
struct OptimizerState {
  std::string name;  // optim.name
  struct Group {
    std::vector<optim::Slot> slots;
    std::vector<std::span<const float>> data;  // slots[k].local floats each
  };
  std::vector<Group> groups;
  std::size_t floats() const;  // held by all groups together
};

// Writes state.bin atomically (common/files.h): each slot's whole-model vector assembled from
// the groups' pieces (a piece two groups hold, factored moments of a matrix two shards share,
// is taken from the first); `model` is the digest of the model.bin written beside it. Throws
// RuntimeError on an I/O error.
void WriteTrainState(const std::string& path, const TrainState& state, const OptimizerState& opt,
                     const FileDigest& model);

// Reads and checks a state.bin: magic, version, meta, and a file length that matches them.
// Throws InputError naming the file with a fix-it hint. VerifyChecksum() checks the rest.
class TrainStateReader {
 public:
  explicit TrainStateReader(std::string path);
  ~TrainStateReader();
  TrainStateReader(const TrainStateReader&) = delete;
  TrainStateReader& operator=(const TrainStateReader&) = delete;

  const TrainState& state() const { return state_; }
  // The optimizer that wrote it and its slots' names and whole-model lengths, in file order.
  const std::string& optimizer() const { return optimizer_; }
  struct SlotRecord {
    std::string name;
    uint64_t floats = 0;
  };
  const std::vector<SlotRecord>& slots() const { return slots_; }
  // Reads the whole file and compares its CRC32C with the one its trailer records; throws
  // InputError naming the file on a mismatch. A file before version 3 has none: no check.
  void VerifyChecksum() const;
  // The digest of model.bin that the trailer records (nullopt before version 3).
  const std::optional<FileDigest>& model_digest() const { return model_digest_; }
  // Throws InputError unless the file holds the state of `name` with exactly `want`'s slots
  // (names and whole-model lengths): another optimizer, other settings (a first moment on or
  // off) or another model are refused with the fix.
  void CheckSlots(const std::string& name, const std::vector<optim::Slot>& want) const;
  // A shard's slots (CheckSlots'), each piece read from its whole-model vector into out[k];
  // throws InputError if any value is not finite.
  void ReadSlots(const std::vector<optim::Slot>& slots, std::span<float* const> out);

 private:
  // optimizer_ and slots_ from the meta (version 4) or the older versions' m and v.
  void ReadSlotRecords(const nlohmann::json& meta, uint32_t version);

  std::string path_;
  std::FILE* f_ = nullptr;
  TrainState state_;
  std::string optimizer_;
  std::vector<SlotRecord> slots_;
  uint64_t n_ = 0, data_offset_ = 0, size_ = 0;
  std::optional<FileDigest> model_digest_;
  uint32_t state_crc32c_ = 0;
};

}  // namespace cputrain::train
