// File helpers shared by every writer of user-visible output (checkpoints, metrics, token
// files, placement.json, reports): nothing is ever left half-written.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace cputrain {

// Writes a file through a temporary sibling ("<path>.tmp.<pid>"): Commit() flushes, fsyncs,
// renames it over `path` and fsyncs the directory, so readers see the old file or the whole
// new one. If the writer is destroyed without Commit() (an error, an exception), the temporary
// is removed and `path` is untouched.
//
// Thread safety: one thread uses a writer at a time.
class AtomicFileWriter {
 public:
  // Throws InputError if the directory does not exist or is not writable.
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Throws RuntimeError on a short write (disk full).
  void Write(const void* data, std::size_t bytes);
  void Write(std::string_view s) { Write(s.data(), s.size()); }
  void Commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string tmp_path_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

// Whole-file helpers. ReadFile throws InputError naming the path if it cannot be read.
std::string ReadFile(const std::string& path);
void WriteFileAtomic(const std::string& path, std::string_view contents);

// fsyncs a directory, so that a rename or unlink in it survives a power cut (best effort: some
// file systems refuse fsync on directories).
void SyncDir(const std::string& dir);

// Creates `dir` and its parents if needed; throws InputError naming the directory otherwise.
void MakeDirs(const std::string& dir);

}  // namespace cputrain
