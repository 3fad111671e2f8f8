// Token files in llm.c's format (docs/data.md): a header of 256 little-endian int32,
//   [0] = 20240520 (magic), [1] = 1 (version), [2] = number of tokens N, the rest 0,
// then N little-endian uint16 token ids. train.bin and val.bin are such files.
//
// Thread safety: a TokenFile is immutable after Open and may be read from any number of threads;
// a TokenFileWriter is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace cputrain::data {

inline constexpr int32_t kTokenFileMagic = 20240520, kTokenFileVersion = 1;
inline constexpr std::size_t kTokenFileHeaderInts = 256;
inline constexpr std::size_t kTokenFileHeaderBytes = kTokenFileHeaderInts * sizeof(int32_t);
// The header counts tokens in an int32.
inline constexpr std::size_t kTokenFileMaxTokens = INT32_MAX;

// Read-only memory map of a validated token file. Movable, not copyable.
class TokenFile {
 public:
  // Maps `path` and checks its header. Throws InputError naming the file and what is wrong:
  // missing or unreadable, not a regular file, shorter than the header, wrong magic (a
  // checkpoint's magic gets its own hint), wrong version, a token count that disagrees with the
  // file size, zero tokens.
  static TokenFile Open(const std::string& path);

  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  // The N token ids; valid while this object lives.
  const uint16_t* data() const { return tokens_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Throws InputError naming the file, the first position and id >= vocab_size, with a hint.
  void CheckBelow(int vocab_size) const;

 private:
  TokenFile() = default;
  void Reset();

  std::string path_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  std::size_t size_ = 0;
};

// Streaming writer: Append() many times, Commit() writes the final count into the header and
// renames atomically; destroyed without Commit -> no file left (and an existing file at `path`
// is untouched).
//
// It writes "<path>.tmp.<pid>" next to `path`, as AtomicFileWriter does, and cannot use that
// class because the header's count is only known at the end and has to be written back over
// the placeholder (AtomicFileWriter only appends).
class TokenFileWriter {
 public:
  // Throws InputError if the directory does not exist or is not writable.
  explicit TokenFileWriter(std::string path);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // Throws InputError if the file would exceed kTokenFileMaxTokens, RuntimeError on a failed
  // write (disk full).
  void Append(const uint16_t* tokens, std::size_t n);
  // Writes the header and fsyncs, without renaming: a caller committing several files does
  // every step that can fail for all of them first (prepare-data: train.bin and val.bin). Throws
  // InputError for zero tokens (the reader refuses such a file), RuntimeError on I/O failure.
  // Commit() calls it if it was not called.
  void Finish();
  // Renames the finished file over `path` and fsyncs the directory.
  void Commit();
  std::size_t count() const { return count_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string tmp_path_;
  std::FILE* file_ = nullptr;
  std::size_t count_ = 0;
  bool finished_ = false;
  bool committed_ = false;
};

}  // namespace cputrain::data
