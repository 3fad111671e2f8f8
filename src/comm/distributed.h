// Distributed: the other processes of a multi-node run, as the trainer sees them. The trainer
// depends on this interface only; src/mpi/ implements it over Open MPI (the MPI glue lives in
// its own module, as gloo keeps its mpi/), and a single-process run passes none.
//
// Hierarchical gradient sync (GradSync): inside a process the groups reduce-scatter each bucket
// through shared memory; then group h's owned part of the bucket is allreduced with group h of
// every other process (AllreduceShard, one communicator per group index), so every process
// ends with the same summed shards and applies the same ZeRO-1 update.
//
// Thread-safety contract: AllreduceShard(h, ...) is called by one thread at a time per group
// index h (group h's driver or its comm thread), concurrently with other groups' calls; every
// process calls it for the same (h, bucket) sequence. The other methods are called by the
// process's main thread only, in the same order on every process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cputrain::comm {

class Distributed {
 public:
  virtual ~Distributed() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every process must train the same thing: the same effective config, the same initial
  // parameters and the same number of replica groups. Throws InputError naming the processes
  // that differ from rank 0.
  virtual void CheckConsistent(uint64_t config_hash, uint64_t model_hash, int groups) = 0;
  // Sum of v over processes, the same on every process (rank order).
  virtual double SumAcrossRanks(double v) = 0;
  // data[0, n) := sum over processes of it, bit-identical on every process.
  virtual void AllreduceShard(int group, float* data, std::size_t n) = 0;
  // Every process's `text`, in rank order (on every process).
  virtual std::vector<std::string> Gather(const std::string& text) = 0;
  // The step this process is on, for the watchdog's messages.
  virtual void SetStep(int step) = 0;
};

// 64-bit FNV-1a, for the consistency hashes (seed: a previous hash, to continue it).
uint64_t Hash64(const void* data, std::size_t bytes, uint64_t seed = 0xcbf29ce484222325ULL);
// The same over 64-bit words, at a pace that suits 500 MB of parameters.
uint64_t HashFloats(const float* p, std::size_t n);

}  // namespace cputrain::comm
