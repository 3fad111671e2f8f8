// Internal to src/comm: the communicator's per-group and per-thread state, shared by the
// per-collective files. Not part of the public API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "comm/comm.h"
#include "comm/kernels.h"
#include "comm/sync.h"
#include "common/wait.h"

namespace cputrain::comm {

// One per group. progress is the contended word (every thread of every group polls it, the
// group's threads add to it): WaitWord is cache-line aligned, and slot starts on the next line,
// so a thread reading a peer's pointers never steals the line that the peer's threads add to.
struct Communicator::GroupState {
  WaitWord progress;  // invariant I1: phase points passed by the group's threads
  // The group's arguments for the current call. Written by the group's thread 0 in Begin, read
  // by peers after their acquire of progress (see Begin and Peer for the ordering argument).
  alignas(kCacheLine) Call slot;
};

// One per (group, thread); written and read only by that thread, so plain fields. Aligned so
// that neighbouring threads' states never share a line.
struct alignas(kCacheLine) Communicator::ThreadState {
  uint32_t phase = 0;  // phase points passed (the same in every thread: invariant I1)
  uint64_t calls = 0;  // collectives called
  // Scratch for one call: each group's send and recv base pointers, read from the slots once.
  // Allocated with the communicator, never per call.
  std::unique_ptr<const float*[]> sends;
  std::unique_ptr<float*[]> recvs;

  void Init(std::size_t groups) {
    sends = std::make_unique<const float*[]>(groups);
    recvs = std::make_unique<float*[]>(groups);
  }
};

// How the collective writes its output: StoreHint::kStreaming once the buffer reaches
// options.streaming_store_bytes (0 = never).
inline StoreHint OutputHint(const CommOptions& o, std::size_t n) {
  return o.streaming_store_bytes != 0 && n * sizeof(float) >= o.streaming_store_bytes
             ? StoreHint::kStreaming
             : StoreHint::kCached;
}

inline void CopyPart(float* dst, const float* src, std::size_t len, StoreHint hint) {
  if (hint == StoreHint::kStreaming) {
    CopyStreaming(dst, src, len);
  } else {
    Copy(dst, src, len);
  }
}

}  // namespace cputrain::comm
