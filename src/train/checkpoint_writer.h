// train/checkpoint_writer: periodic checkpoints written from a snapshot on a thread of their own,
// so that training stalls only for the copy (gpt2-124M: 1.5 GB, copied by several threads into a
// buffer faulted in once, at Reserve; 0.3 s against seconds to write it; docs/formats.md).
// (MADV_HUGEPAGE made faulting it in slower here: the kernel compacts memory to find huge pages.)
// One save is in flight at a time: the next save, the final one, or the end of the run waits for it
// first. The write itself is SaveCheckpointDir (train/checkpoint_dir.h): crash-safe either way.
//
// Thread safety: every method is called from the main thread. The background thread owns the
// snapshot from Start to the join in Wait; the main thread touches neither until then. error_
// and the timings are written by the background thread before it ends and read by the main
// thread after join(), which orders them. failed_ is the one value both threads touch while a
// save runs (failed() says why its memory order is enough).
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "train/checkpoint_dir.h"

namespace cputrain::train {

class CheckpointWriter {
 public:
  CheckpointWriter(std::string out_dir, int keep) : out_dir_(std::move(out_dir)), keep_(keep) {}
  // Waits for a save in flight; its error, if any, is dropped (the run is already failing).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Allocates and faults in a snapshot of `floats` floats (the weights and the optimizer's state),
  // so that no save pays for it. Returns the seconds it took. Optional: SaveInBackground grows
  // the snapshot itself if needed.
  double Reserve(std::size_t floats);
  // Waits for the previous save (rethrowing its error), copies c's weights and optimizer state,
  // and starts writing them. Returns the step directory it writes.
  std::string SaveInBackground(const CheckpointContents& c);
  // Waits for the previous save, then writes c on this thread.
  std::string Save(const CheckpointContents& c);
  // Waits for the save in flight, if any; rethrows its RuntimeError. Returns a line saying
  // what was saved and how fast ("" if nothing was in flight).
  std::string Wait();
  // Rethrows the error of a background save that has already failed (a full disk), without
  // waiting for one still running: called after every step, so that a failed save stops the run
  // at once, as a foreground save does, not checkpoint_every steps later at the next save.
  void ThrowIfFailed() {
    if (failed()) Wait();
  }

 private:
  const std::string out_dir_;
  const int keep_;
  std::thread thread_;
  struct Buffer {  // anonymous memory, unmapped by the destructor
    Buffer() = default;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer();
    void Unmap();
    float* data = nullptr;
    std::size_t floats = 0;
  };
  void Grow(std::size_t floats);  // the snapshot holds at least `floats`
  Buffer snap_;                   // the snapshot: weights, then the optimizer's slots
  std::size_t snap_used_ = 0;
  CheckpointContents snapshot_;
  // True from the moment the background thread has stored its error_ until Wait() rethrows it.
  // Acquire pairs with the thread's release store, so error_ is complete when failed() is true
  // (Wait's join orders it again before it is read; the flag only says when to join).
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
  std::string dir_;
  double write_secs_ = 0;
};

}  // namespace cputrain::train
