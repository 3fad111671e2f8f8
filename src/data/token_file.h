// Token files in llm.c's format (docs/data.md): a header of 256 little-endian int32,
//   [0] = 20240520 (magic), [1] = version, [2] = number of tokens N, the rest 0,
// then N little-endian token ids: uint16 in version 1 (llm.c's), uint32 in version 2 (for
// vocabularies above 65,536 ids, e.g. Llama 3's 128,256). train.bin and val.bin are such files.
// Writers use version 1 whenever every id fits (TokenFileVersionFor), so GPT-2 files are llm.c's.
//
// Thread safety: a TokenFile is immutable after Open and may be read from any number of threads;
// a TokenFileWriter is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace cputrain::data {

inline constexpr int32_t kTokenFileMagic = 20240520;
// Version 1 holds uint16 ids, version 2 uint32 ids.
inline constexpr int32_t kTokenFileVersion = 1, kTokenFileVersionWide = 2;
inline constexpr std::size_t kTokenFileHeaderInts = 256;
inline constexpr std::size_t kTokenFileHeaderBytes = kTokenFileHeaderInts * sizeof(int32_t);
// The header counts tokens in an int32.
inline constexpr std::size_t kTokenFileMaxTokens = INT32_MAX;

// The version a tokenizer of `vocab_size` ids writes: 1 (uint16) when every id fits 16 bits
// (vocab_size <= 65536), else 2 (uint32).
int TokenFileVersionFor(int vocab_size);

// Read-only memory map of a validated token file. Movable, not copyable.
class TokenFile {
 public:
  // Maps `path` and checks its header. Throws InputError naming the file and what is wrong:
  // missing or unreadable, not a regular file, shorter than the header, wrong magic (a
  // checkpoint's magic gets its own hint), wrong version, a token count that disagrees with the
  // file size, zero tokens. Versions 1 and 2 are read.
  static TokenFile Open(const std::string& path);

  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  int version() const { return version_; }    // 1: uint16 ids, 2: uint32 ids
  std::size_t size() const { return size_; }  // N
  // Id i (< size()).
  uint32_t at(std::size_t i) const {
    return version_ == kTokenFileVersion ? static_cast<const uint16_t*>(tokens_)[i]
                                         : static_cast<const uint32_t*>(tokens_)[i];
  }
  // Copies ids [begin, begin + n) into out (begin + n <= size()); one branch on the width, then
  // a plain widening loop.
  void Read(std::size_t begin, std::size_t n, int* out) const;
  const std::string& path() const { return path_; }

  // Throws InputError naming the file, the first position and id >= vocab_size, with a hint.
  void CheckBelow(int vocab_size) const;

 private:
  TokenFile() = default;
  void Reset();

  std::string path_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const void* tokens_ = nullptr;  // uint16_t[] (version 1) or uint32_t[] (version 2)
  std::size_t size_ = 0;
  int version_ = kTokenFileVersion;
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
  // Writes `version` (1: uint16 ids, 2: uint32; TokenFileVersionFor picks it). Throws by errno
  // (common/files.h's ThrowWriteError): InputError if the directory does not exist or is not
  // writable, RuntimeError otherwise (too many open files: a hint naming `ulimit -n`). The file
  // stays open until Finish(), which closes it.
  explicit TokenFileWriter(std::string path, int version = kTokenFileVersion);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // Throws InputError if the file would exceed kTokenFileMaxTokens, RuntimeError on a failed
  // write (disk full). Either width into either version; into version 1 every id must be below
  // 65536 (checked: a caller picked the version from the vocabulary, so a bigger id is a bug).
  void Append(const uint16_t* tokens, std::size_t n);
  void Append(const uint32_t* tokens, std::size_t n);
  // Writes the header and fsyncs, without renaming: a caller committing several files does
  // every step that can fail for all of them first (prepare-data: train.bin and val.bin). Throws
  // InputError for zero tokens (the reader refuses such a file), RuntimeError on I/O failure.
  // Commit() calls it if it was not called.
  void Finish();
  // Renames the finished file over `path` and fsyncs the directory.
  void Commit();
  std::size_t count() const { return count_; }
  const std::string& path() const { return path_; }
  int version() const { return version_; }

 private:
  void Write(const void* ids, std::size_t n);  // n ids already in the file's width
  std::string path_;
  int version_;
  std::string tmp_path_;
  std::FILE* file_ = nullptr;
  std::size_t count_ = 0;
  bool finished_ = false;
  bool committed_ = false;
};

}  // namespace cputrain::data
