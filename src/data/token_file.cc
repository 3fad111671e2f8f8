#include "data/token_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
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

}  // namespace

TokenFile TokenFile::Open(const std::string& path) {
  // Regular file, opened without blocking on a FIFO, at most a full header's worth of tokens.
  InputFile in = InputFile::Open(
      path, InputKind{"token file", "a .bin file made by `cputrain-numa prepare-data`",
                      kTokenFileHeaderBytes + 2 * kTokenFileMaxTokens,
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
  if (header[1] != kTokenFileVersion) {
    throw InputError(fmt::format("token file '{}' has version {}; this build reads version {}",
                                 path, header[1], kTokenFileVersion),
                     kRecreateHint);
  }
  std::size_t payload = bytes - kTokenFileHeaderBytes;
  if (header[2] < 0 || static_cast<std::size_t>(header[2]) * 2 != payload) {
    throw InputError(
        fmt::format("token file '{}': its header says {} tokens ({} bytes after the header) but "
                    "the file has {} bytes after the header",
                    path, header[2], static_cast<int64_t>(header[2]) * 2, payload),
        fmt::format("the file is truncated or was changed after it was written; {}",
                    kRecreateHint));
  }
  if (header[2] == 0) {
    throw InputError(fmt::format("token file '{}' holds no tokens", path),
                     fmt::format("{} from a non-empty corpus", kRecreateHint));
  }
  f.tokens_ =
      reinterpret_cast<const uint16_t*>(static_cast<const char*>(f.map_) + kTokenFileHeaderBytes);
  f.size_ = static_cast<std::size_t>(header[2]);
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

void TokenFile::CheckBelow(int vocab_size) const {
  // A branch-free max over the whole file first (vectorizes; the common case is "all fine"),
  // then a scan for the first offender only if there is one.
  uint16_t max = 0;
  for (std::size_t i = 0; i < size_; ++i) max = tokens_[i] > max ? tokens_[i] : max;
  if (static_cast<int>(max) < vocab_size) return;
  for (std::size_t i = 0; i < size_; ++i) {
    if (static_cast<int>(tokens_[i]) >= vocab_size) {
      throw InputError(
          fmt::format("token file '{}': token {} (0-based, byte offset {}) is {}, not below the "
                      "model's vocabulary size {}",
                      path_, i, kTokenFileHeaderBytes + 2 * i, tokens_[i], vocab_size),
          "the file was made with a different tokenizer than the model uses; re-create it with "
          "`cputrain-numa prepare-data --tokenizer` matching the model (gpt2: 50257, bytes: 256)");
    }
  }
}

TokenFileWriter::TokenFileWriter(std::string path) : path_(std::move(path)) {
  tmp_path_ = fmt::format("{}.tmp.{}", path_, ::getpid());
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  if (file_ == nullptr) {
    throw InputError(fmt::format("cannot write '{}': {}", path_, std::strerror(errno)),
                     fmt::format("check that directory '{}' exists and is writable", DirOf(path_)));
  }
  // The placeholder header; Finish() writes the count into it.
  int32_t header[kTokenFileHeaderInts] = {kTokenFileMagic, kTokenFileVersion, 0};
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
  CPUTRAIN_CHECK(!finished_ && file_ != nullptr, "Append after Finish");
  if (n == 0) return;
  if (n > kTokenFileMaxTokens - count_) {
    throw InputError(
        fmt::format("'{}' would hold more than {} tokens, the most a token file's int32 header "
                    "can count",
                    path_, kTokenFileMaxTokens),
        "split the corpus and run prepare-data on each part");
  }
  if (std::fwrite(tokens, sizeof(uint16_t), n, file_) != n) {
    throw RuntimeError(fmt::format("writing '{}' failed: {}", tmp_path_, std::strerror(errno)),
                       "check free disk space; no partial file is left at the destination");
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
    throw RuntimeError(fmt::format("writing '{}' failed: {}", tmp_path_, std::strerror(err)),
                       "check free disk space; no partial file is left at the destination");
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
