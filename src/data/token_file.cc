#include "data/token_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <utility>

#include "common/error.h"
#include "common/files.h"

namespace cputrain::data {
namespace {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and are mapped as they are");

// llm.c's checkpoint magic: the file most often passed where a token file belongs.
constexpr int32_t kCheckpointMagic = 20240326;

const char kRecreateHint[] = "re-create it with `cputrain-numa prepare-data`";

std::string DirOf(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// A token file that cannot be written, by errno (README, "Errors and exit codes"): too many open
// files is this process's limit, not the disk or the path; the rest as ThrowWriteError.
[[noreturn]] void ThrowTokenWriteError(const std::string& message, int err,
                                       const std::string& path) {
  if (err == EMFILE || err == ENFILE) {
    throw RuntimeError(message, err == EMFILE
                                    ? "this process has as many files open as `ulimit -n` allows; "
                                      "raise it (ulimit -n 65536) and run again"
                                    : "the system's table of open files is full (fs.file-max); "
                                      "close other programs or raise it, and run again");
  }
  ThrowWriteError(message, err, path,
                  "check free disk space and quota; no partial file is left at the destination");
}

}  // namespace

int TokenFileVersionFor(int vocab_size) {
  return vocab_size <= 65536 ? kTokenFileVersion : kTokenFileVersionWide;
}

TokenFile TokenFile::Open(const std::string& path) {
  // Regular file, opened without blocking on a FIFO, at most a full header's worth of tokens.
  InputFile in = InputFile::Open(
      path, InputKind{"token file", "a .bin file made by `cputrain-numa prepare-data`",
                      kTokenFileHeaderBytes + sizeof(uint32_t) * kTokenFileMaxTokens,
                      "check data.train / data.val; token files are made by `cputrain-numa "
                      "prepare-data`"});
  const auto bytes = static_cast<std::size_t>(in.size());
  if (bytes < kTokenFileHeaderBytes) {
    throw InputError(fmt::format("token file '{}' has {} bytes, fewer than its {}-byte header",
                                 path, bytes, kTokenFileHeaderBytes),
                     fmt::format("the file is truncated or not a token file; {}", kRecreateHint));
  }
  TokenFile f;
  f.path_ = path;
  f.map_ = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, in.fd(), 0);
  if (f.map_ == MAP_FAILED) {
    f.map_ = nullptr;
    throw RuntimeError(fmt::format("cannot map token file '{}': {}", path, std::strerror(errno)));
  }
  f.map_bytes_ = bytes;
  const auto* header = static_cast<const int32_t*>(f.map_);
  if (header[0] != kTokenFileMagic) {
    throw InputError(
        fmt::format("'{}' is not a token file: its magic number is {}, a token file's is {}", path,
                    header[0], kTokenFileMagic),
        header[0] == kCheckpointMagic
            ? std::string("that magic is a model checkpoint's; pass the checkpoint where a model "
                          "is expected and a train.bin/val.bin made by `cputrain-numa "
                          "prepare-data` as data")
            : kRecreateHint);
  }
  if (header[1] != kTokenFileVersion && header[1] != kTokenFileVersionWide) {
    throw InputError(
        fmt::format("token file '{}' has version {}; this build reads versions {} (uint16 ids) "
                    "and {} (uint32 ids)",
                    path, header[1], kTokenFileVersion, kTokenFileVersionWide),
        kRecreateHint);
  }
  const std::size_t width = header[1] == kTokenFileVersion ? 2 : 4;
  std::size_t payload = bytes - kTokenFileHeaderBytes;
  if (header[2] < 0) {
    throw InputError(fmt::format("token file '{}': its header says {} tokens, and a count cannot "
                                 "be negative (the file has {} bytes after the header)",
                                 path, header[2], payload),
                     fmt::format("the header is damaged; {}", kRecreateHint));
  }
  if (static_cast<std::size_t>(header[2]) * width != payload) {
    throw InputError(
        fmt::format("token file '{}': its header says {} tokens ({} bytes after the header, "
                    "version {}) but the file has {} bytes after the header",
                    path, header[2], static_cast<std::size_t>(header[2]) * width, header[1],
                    payload),
        fmt::format("the file is truncated or was changed after it was written; {}",
                    kRecreateHint));
  }
  if (header[2] == 0) {
    throw InputError(fmt::format("token file '{}' holds no tokens", path),
                     fmt::format("{} from a non-empty corpus", kRecreateHint));
  }
  f.tokens_ = static_cast<const char*>(f.map_) + kTokenFileHeaderBytes;
  f.size_ = static_cast<std::size_t>(header[2]);
  f.version_ = header[1];
  return f;
}

TokenFile::TokenFile(TokenFile&& other) noexcept { *this = std::move(other); }

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    Reset();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    size_ = std::exchange(other.size_, 0);
    version_ = other.version_;
  }
  return *this;
}

TokenFile::~TokenFile() { Reset(); }

void TokenFile::Reset() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  tokens_ = nullptr;
  size_ = 0;
}

void TokenFile::Read(std::size_t begin, std::size_t n, int* out) const {
  if (version_ == kTokenFileVersion) {
    const uint16_t* ids = static_cast<const uint16_t*>(tokens_) + begin;
    for (std::size_t k = 0; k < n; ++k) out[k] = ids[k];
  } else {
    const uint32_t* ids = static_cast<const uint32_t*>(tokens_) + begin;
    for (std::size_t k = 0; k < n; ++k) out[k] = static_cast<int>(ids[k]);
  }
}

namespace {

// The first position of an id >= bound, or n. A branch-free max over the whole file first
// (vectorizes; the common case is "all fine"), then a scan for the first offender only if there
// is one.
template <typename Id>
std::size_t FirstAtOrAbove(const Id* ids, std::size_t n, uint64_t bound) {
  Id max = 0;
  for (std::size_t i = 0; i < n; ++i) max = ids[i] > max ? ids[i] : max;
  if (max < bound) return n;
  std::size_t i = 0;
  while (ids[i] < bound) ++i;
  return i;
}

}  // namespace

void TokenFile::CheckBelow(int vocab_size) const {
  const auto bound = static_cast<uint64_t>(vocab_size < 0 ? 0 : vocab_size);
  const std::size_t width = version_ == kTokenFileVersion ? 2 : 4;
  const std::size_t i = version_ == kTokenFileVersion
                            ? FirstAtOrAbove(static_cast<const uint16_t*>(tokens_), size_, bound)
                            : FirstAtOrAbove(static_cast<const uint32_t*>(tokens_), size_, bound);
  if (i == size_) return;
  throw InputError(
      fmt::format("token file '{}': token {} (0-based, byte offset {}) is {}, not below the "
                  "model's vocabulary size {}",
                  path_, i, kTokenFileHeaderBytes + width * i, at(i), vocab_size),
      "the file was made with a different tokenizer than the model uses; re-create it with "
      "`cputrain-numa prepare-data --tokenizer` matching the model (gpt2: 50257, bytes: 256, a "
      "tokenizer.json directory: its vocabulary)");
}

TokenFileWriter::TokenFileWriter(std::string path, int version)
    : path_(std::move(path)), version_(version) {
  CPUTRAIN_CHECK(version == kTokenFileVersion || version == kTokenFileVersionWide,
                 "unknown token file version");
  tmp_path_ = fmt::format("{}.tmp.{}", path_, ::getpid());
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  if (file_ == nullptr) {
    const int err = errno;
    ThrowTokenWriteError(fmt::format("cannot write '{}': {}", path_, std::strerror(err)), err,
                         path_);
  }
  // The placeholder header; Finish() writes the count into it.
  int32_t header[kTokenFileHeaderInts] = {kTokenFileMagic, version_, 0};
  if (std::fwrite(header, sizeof(header), 1, file_) != 1) {
    int err = errno;
    std::fclose(file_);
    file_ = nullptr;
    std::remove(tmp_path_.c_str());
    throw RuntimeError(fmt::format("writing '{}' failed: {}", tmp_path_, std::strerror(err)));
  }
}

TokenFileWriter::~TokenFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_) std::remove(tmp_path_.c_str());
}

void TokenFileWriter::Append(const uint16_t* tokens, std::size_t n) {
  if (version_ == kTokenFileVersion) return Write(tokens, n);
  uint32_t wide[4096];
  for (std::size_t done = 0; done < n;) {
    const std::size_t take = std::min(n - done, std::size(wide));
    std::copy(tokens + done, tokens + done + take, wide);
    Write(wide, take);
    done += take;
  }
}

void TokenFileWriter::Append(const uint32_t* tokens, std::size_t n) {
  if (version_ == kTokenFileVersionWide) return Write(tokens, n);
  uint16_t narrow[4096];
  for (std::size_t done = 0; done < n;) {
    const std::size_t take = std::min(n - done, std::size(narrow));
    uint32_t high = 0;  // any bit above the low 16 of any id (a branch-free loop vectorizes)
    for (std::size_t k = 0; k < take; ++k) {
      high |= tokens[done + k];
      narrow[k] = static_cast<uint16_t>(tokens[done + k]);
    }
    CPUTRAIN_CHECK(high <= 0xFFFF, "an id above 65535 for a version 1 token file");
    Write(narrow, take);
    done += take;
  }
}

void TokenFileWriter::Write(const void* ids, std::size_t n) {
  CPUTRAIN_CHECK(!finished_ && file_ != nullptr, "Append after Finish");
  if (n == 0) return;
  if (n > kTokenFileMaxTokens - count_) {
    throw InputError(
        fmt::format("'{}' would hold more than {} tokens, the most a token file's int32 header "
                    "can count",
                    path_, kTokenFileMaxTokens),
        "split the corpus and run prepare-data on each part (or use --shard-tokens)");
  }
  const std::size_t width = version_ == kTokenFileVersion ? 2 : 4;
  if (std::fwrite(ids, width, n, file_) != n) {
    const int err = errno;
    ThrowTokenWriteError(fmt::format("writing '{}' failed: {}", tmp_path_, std::strerror(err)), err,
                         path_);
  }
  count_ += n;
}

void TokenFileWriter::Finish() {
  if (finished_) return;
  CPUTRAIN_CHECK(file_ != nullptr, "Finish after a failed Finish");
  if (count_ == 0) {
    throw InputError(fmt::format("no tokens to write to '{}'", path_),
                     "a token file must hold at least one token; give a non-empty corpus");
  }
  auto count = static_cast<int32_t>(count_);
  bool ok = std::fflush(file_) == 0 &&
            ::pwrite(::fileno(file_), &count, sizeof(count), 2 * sizeof(int32_t)) ==
                static_cast<ssize_t>(sizeof(count)) &&
            ::fsync(::fileno(file_)) == 0;
  int err = errno;
  ok = std::fclose(file_) == 0 && ok;
  file_ = nullptr;
  if (!ok) {
    ThrowTokenWriteError(fmt::format("writing '{}' failed: {}", tmp_path_, std::strerror(err)), err,
                         path_);
  }
  finished_ = true;
}

void TokenFileWriter::Commit() {
  CPUTRAIN_CHECK(!committed_, "Commit called twice");
  Finish();
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    throw RuntimeError(
        fmt::format("renaming '{}' to '{}' failed: {}", tmp_path_, path_, std::strerror(errno)));
  }
  committed_ = true;
  int dir = ::open(DirOf(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);  // best effort: some file systems refuse fsync on directories
    ::close(dir);
  }
}

}  // namespace cputrain::data
