#include "common/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "common/crc32c.h"
#include "common/error.h"

namespace cputrain {
namespace {

std::string DirOf(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

void FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);  // best effort: some file systems refuse fsync on directories
    ::close(fd);
  }
}

const char* FileTypeName(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

constexpr const char* kSpaceHint =
    "check free disk space; the previous version of the file is untouched";

}  // namespace

bool PathAtFault(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
    case EISDIR:
    case EACCES:
    case EPERM:
    case EROFS:
    case ENAMETOOLONG:
    case ELOOP:
    case EEXIST:
      return true;
    default:
      return false;
  }
}

void ThrowWriteError(const std::string& message, int err, const std::string& path,
                     const std::string& io_hint) {
  if (PathAtFault(err)) {
    throw InputError(message, fmt::format("check that directory '{}' exists and is writable by "
                                          "this user",
                                          DirOf(path)));
  }
  throw RuntimeError(message, io_hint);
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  // The rename at Commit would fail only then, after the whole file was written, and with
  // "Device or resource busy" for "." (issue 43).
  std::error_code ec;
  if (path_.empty() || path_.back() == '/' || std::filesystem::is_directory(path_, ec)) {
    throw InputError(fmt::format("cannot write '{}': it is a directory", path_),
                     "give the path of a file to write (a name inside the directory)");
  }
  // A writer of this name killed before its rename (kill -9) left its temporary: the next one
  // removes it, so they do not pile up (issue 43: 7 of them, 102 MB, beside one .gguf).
  RemoveDeadTemporariesOf(path_);
  tmp_path_ = fmt::format("{}.tmp.{}", path_, ::getpid());
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  if (!file_) {
    const int err = errno;
    ThrowWriteError(fmt::format("cannot write '{}': {}", path_, std::strerror(err)), err, path_,
                    kSpaceHint);
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (file_) std::fclose(file_);
  if (!committed_) std::remove(tmp_path_.c_str());
}

void AtomicFileWriter::Write(const void* data, std::size_t bytes) {
  // The checksum and the write take turns on pieces that fit in L2, so memory is read once: the
  // write copies what the checksum just brought in. Measured on a gpt2-124M save
  // (docs/formats.md, "Checksums"): checksumming on a second thread while writing cost more on
  // a loaded machine, competing for its cores and its memory bandwidth.
  constexpr std::size_t kPiece = std::size_t{256} << 10;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t done = 0; done < bytes;) {
    const std::size_t n = std::min(kPiece, bytes - done);
    digest_.crc32c = Crc32c(digest_.crc32c, p + done, n);
    if (std::fwrite(p + done, 1, n, file_) != n) {
      const int err = errno;
      ThrowWriteError(fmt::format("writing '{}' failed: {}", tmp_path_, std::strerror(err)), err,
                      tmp_path_, kSpaceHint);
    }
    done += n;
  }
  digest_.bytes += bytes;
}

void AtomicFileWriter::Commit() {
  CPUTRAIN_CHECK(!committed_, "Commit called twice");
  bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  int err = errno;
  ok = (std::fclose(file_) == 0) && ok;
  file_ = nullptr;
  if (!ok) {
    ThrowWriteError(fmt::format("writing '{}' failed: {}", tmp_path_, std::strerror(err)), err,
                    tmp_path_, kSpaceHint);
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    err = errno;
    ThrowWriteError(
        fmt::format("renaming '{}' to '{}' failed: {}", tmp_path_, path_, std::strerror(err)), err,
        path_, kSpaceHint);
  }
  committed_ = true;
  FsyncDir(DirOf(path_));
}

InputFile InputFile::Open(const std::string& path, const InputKind& kind) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    throw InputError(fmt::format("{} '{}': cannot open: {}", kind.what, path, std::strerror(errno)),
                     std::string(kind.hint));
  }
  InputFile f(path, fd, 0);  // closes fd if a check below throws
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw RuntimeError(
        fmt::format("{} '{}': fstat failed: {}", kind.what, path, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    throw InputError(fmt::format("{} '{}' is a directory, not a regular file: expected {}",
                                 kind.what, path, kind.expected),
                     std::string(kind.hint));
  }
  if (!S_ISREG(st.st_mode)) {
    throw InputError(fmt::format("{} '{}' is not a regular file ({}), expected {}", kind.what, path,
                                 FileTypeName(st.st_mode), kind.expected),
                     std::string(kind.hint));
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > kind.max_bytes) {
    throw InputError(fmt::format("{} '{}' is {} bytes, more than the {} bytes a {} may have",
                                 kind.what, path, size, kind.max_bytes, kind.what),
                     fmt::format("pass {} (limits: docs/formats.md)", kind.expected));
  }
  f.size_ = size;
  return f;
}

InputFile::InputFile(InputFile&& other) noexcept { *this = std::move(other); }

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

bool InputFile::Read(void* dst, std::size_t bytes) {
  auto* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::read(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw RuntimeError(fmt::format("reading '{}' failed: {}", path_, std::strerror(errno)));
    }
    if (n == 0) return false;
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

std::string InputFile::ReadAll() {
  std::string out(static_cast<std::size_t>(size_), '\0');
  if (!Read(out.data(), out.size())) {
    throw InputError(fmt::format("'{}' became shorter while it was read", path_),
                     "do not change the file while cputrain-numa reads it");
  }
  return out;
}

std::string ReadFile(const std::string& path) {
  return ReadFile(path, InputKind{"file", "a regular file", kMaxJsonBytes, "check the path"});
}

std::string ReadFile(const std::string& path, const InputKind& kind) {
  return InputFile::Open(path, kind).ReadAll();
}

RecordFile::RecordFile(std::string path, bool truncate, std::string io_hint)
    : path_(std::move(path)), hint_(std::move(io_hint)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0),
               0644);
  if (fd_ < 0) {
    const int err = errno;
    ThrowWriteError(fmt::format("cannot write '{}': {}", path_, std::strerror(err)), err, path_,
                    hint_);
  }
  size_ = static_cast<std::uint64_t>(::lseek(fd_, 0, SEEK_END));
}

RecordFile::~RecordFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RecordFile::Append(std::string_view record) {
  // One write(2) a record; a short one (the disk filled up in the middle of the record) has no
  // errno, so the rest is written again: that gets the reason (ENOSPC: "No space left on
  // device"), or the rest of the record if room came back.
  std::size_t done = 0;
  ssize_t n = 0;
  while (done < record.size() &&
         (n = ::write(fd_, record.data() + done, record.size() - done)) > 0) {
    done += static_cast<std::size_t>(n);
  }
  if (done == record.size()) {
    size_ += record.size();
    return;
  }
  const int err = n < 0 ? errno : ENOSPC;  // 0 bytes written: no room either
  if (::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
    // Could not cut the torn record: its readers drop it (and a resumed run rewrites the file).
  }
  ThrowWriteError(fmt::format("writing '{}' failed: {}", path_, std::strerror(err)), err, path_,
                  hint_);
}

void WriteFileAtomic(const std::string& path, std::string_view contents) {
  AtomicFileWriter w(path);
  w.Write(contents);
  w.Commit();
}

FileDigest DigestFile(const std::string& path, const InputKind& kind, std::uint64_t limit) {
  InputFile f = InputFile::Open(path, kind);
  FileDigest d;
  d.bytes = std::min(limit, f.size());
  std::vector<unsigned char> buf(std::size_t{8} << 20);
  for (std::uint64_t left = d.bytes; left > 0;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, buf.size()));
    if (!f.Read(buf.data(), n)) {
      throw InputError(fmt::format("'{}' became shorter while it was read", path),
                       "do not change the file while cputrain-numa reads it");
    }
    d.crc32c = Crc32c(d.crc32c, buf.data(), n);
    left -= n;
  }
  return d;
}

void SyncDir(const std::string& dir) { FsyncDir(dir); }

void MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    ThrowWriteError(fmt::format("cannot create directory '{}': {}", dir,
                                ec ? ec.message() : "a file with that name exists"),
                    ec ? ec.value() : EEXIST, dir, kSpaceHint);
  }
}

bool IsTemporary(const std::string& path) {
  return std::filesystem::path(path).filename().string().find(".tmp.") != std::string::npos;
}

long TemporaryOwner(const std::string& path) {
  const std::string name = std::filesystem::path(path).filename().string();
  const std::size_t at = name.rfind(".tmp.");
  if (at == std::string::npos) return 0;
  const std::string digits = name.substr(at + 5);
  if (digits.empty() || digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return 0;
  }
  return std::stol(digits);
}

namespace {

// The temporaries directly in `dir` whose name starts with `prefix` and whose owner is no longer
// running (kill(pid, 0) says ESRCH; EPERM: another user's live process), removed.
int RemoveDead(const std::string& dir, const std::string& prefix) {
  int removed = 0;
  std::error_code ec;
  for (const std::filesystem::directory_entry& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().filename().string().compare(0, prefix.size(), prefix) != 0) continue;
    const long pid = TemporaryOwner(e.path().string());
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or EPERM
    std::error_code rm;
    removed += std::filesystem::remove_all(e.path(), rm) > 0 ? 1 : 0;
  }
  return removed;
}

}  // namespace

int RemoveDeadTemporaries(const std::string& dir) { return RemoveDead(dir, ""); }

int RemoveDeadTemporariesOf(const std::string& path) {
  return RemoveDead(DirOf(path), std::filesystem::path(path).filename().string() + ".tmp.");
}

}  // namespace cputrain
