// File helpers shared by every writer of user-visible output (checkpoints, metrics, token
// files, placement.json, reports): nothing is ever left half-written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace cputrain {

// A file's length and CRC32C (common/crc32c.h): what a checkpoint records of its files.
struct FileDigest {
  std::uint64_t bytes = 0;
  std::uint32_t crc32c = 0;
  bool operator==(const FileDigest&) const = default;
};

// The one rule for a failed write, creating a directory, opening, writing, fsyncing or renaming
// alike, and whether it happens at start or in the middle of a save (README, "Errors and exit
// codes"): its errno decides. PathAtFault — the path does not exist, is not a directory, may not
// be written (ENOENT, ENOTDIR, EISDIR, EACCES, EPERM, EROFS, ENAMETOOLONG, ELOOP, EEXIST) — is
// an InputError (exit 2: the command or the permissions must change); anything else — disk full,
// quota, an I/O error (ENOSPC, EDQUOT, EIO, ...) — a RuntimeError (exit 1) with `io_hint`.
bool PathAtFault(int err);
[[noreturn]] void ThrowWriteError(const std::string& message, int err, const std::string& path,
                                  const std::string& io_hint);

// Writes a file through a temporary sibling ("<path>.tmp.<pid>"): Commit() flushes, fsyncs,
// renames it over `path` and fsyncs the directory, so readers see the old file or the whole
// new one. If the writer is destroyed without Commit() (an error, an exception), the temporary
// is removed and `path` is untouched; the temporaries of writers killed before that (kill -9)
// are removed by the next writer of `path` (RemoveDeadTemporariesOf).
//
// Thread safety: one thread uses a writer at a time.
class AtomicFileWriter {
 public:
  // Throws as ThrowWriteError does (the directory does not exist or is not writable: exit 2),
  // and InputError if `path` is a directory.
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Throws as ThrowWriteError does (disk full: RuntimeError). Checksums what it writes, piece
  // by piece as it writes it (digest()).
  void Write(const void* data, std::size_t bytes);
  void Write(std::string_view s) { Write(s.data(), s.size()); }
  void Commit();
  const std::string& path() const { return path_; }
  // The length and CRC32C of everything written so far.
  const FileDigest& digest() const { return digest_; }

 private:
  std::string path_;
  std::string tmp_path_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
  FileDigest digest_;
};

// A file that grows by whole records (metrics.jsonl's lines, TensorBoard's event records): each
// Append is one write(2), and one that fails part way is cut back to the end of the last whole
// record, so the file only ever holds whole records (a process killed mid-write can still leave
// a torn last record: its readers drop it).
//
// Thread safety: one thread uses a file at a time.
class RecordFile {
 public:
  // Opens `path` for appending (emptied first with `truncate`). Throws as ThrowWriteError does,
  // with io_hint.
  RecordFile(std::string path, bool truncate, std::string io_hint);
  ~RecordFile();
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;
  // Throws as ThrowWriteError does, naming the file, if the record cannot be written whole.
  void Append(std::string_view record);
  const std::string& path() const { return path_; }

 private:
  std::string path_, hint_;
  int fd_ = -1;
  std::uint64_t size_ = 0;  // the end of the last whole record
};

// What a caller expects of one kind of input file, for InputFile::Open's checks and messages.
struct InputKind {
  std::string_view what;      // names the input in messages: "checkpoint", "config file"
  std::string_view expected;  // what it should be: "a model.bin file", "a YAML file"
  std::uint64_t max_bytes;    // larger files are refused before anything is read
  std::string_view hint;      // how to fix a bad path: "check --checkpoint"
};

// The size bounds of each kind of input (docs/formats.md). Each is far above any real file of
// its kind and keeps a damaged or hostile one from sizing memory.
inline constexpr std::uint64_t kMaxConfigBytes = 1ull << 20;        // YAML config: 1 MiB
inline constexpr std::uint64_t kMaxVocabBytes = 64ull << 20;        // encoder.json, vocab.bpe
inline constexpr std::uint64_t kMaxTopologyXmlBytes = 64ull << 20;  // lstopo --of xml
inline constexpr std::uint64_t kMaxCheckpointBytes = 1ull << 42;    // 4 TiB: 2^40 fp32 params
inline constexpr std::uint64_t kMaxJsonBytes = 1ull << 30;          // ReadFile's default: 1 GiB

// An input file opened for reading, after the checks every reader of user input needs: it is
// opened with O_NONBLOCK (a FIFO cannot block the open), and must be a regular file (not a
// directory, FIFO, socket or device such as /dev/zero) of at most kind.max_bytes. The size is
// taken once, from fstat on the open descriptor, so it is the size of what is read.
//
// Thread safety: one thread uses a file at a time.
class InputFile {
 public:
  // Throws InputError naming the file and what is wrong, with kind.hint.
  static InputFile Open(const std::string& path, const InputKind& kind);
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  int fd() const { return fd_; }
  std::uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads exactly `bytes` at the current position; false at end of file (a file that shrank),
  // RuntimeError on an I/O error.
  bool Read(void* dst, std::size_t bytes);
  // The whole file (size() bytes); InputError if it changes size while being read.
  std::string ReadAll();

 private:
  InputFile(std::string path, int fd, std::uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// Whole-file helpers. ReadFile reads an InputFile of `kind` (by default any regular file up to
// kMaxJsonBytes) and throws InputError naming the path if it cannot be read.
std::string ReadFile(const std::string& path);
std::string ReadFile(const std::string& path, const InputKind& kind);
void WriteFileAtomic(const std::string& path, std::string_view contents);

// The digest of the file at `path`: of its first `limit` bytes, or all of it if shorter. Throws
// InputError as InputFile::Open does.
FileDigest DigestFile(const std::string& path, const InputKind& kind,
                      std::uint64_t limit = UINT64_MAX);

// fsyncs a directory, so that a rename or unlink in it survives a power cut (best effort: some
// file systems refuse fsync on directories).
void SyncDir(const std::string& dir);

// Creates `dir` and its parents if needed; throws as ThrowWriteError does, naming the directory.
void MakeDirs(const std::string& dir);

// Temporaries: every writer here names its temporary "<name>.tmp.<pid>" (AtomicFileWriter,
// TokenFileWriter, checkpoint step directories). IsTemporary: the file name has ".tmp.".
bool IsTemporary(const std::string& path);
// The pid a temporary's name ends with ("x.bin.tmp.4242" -> 4242), or 0 if it ends otherwise.
long TemporaryOwner(const std::string& path);
// Removes the temporaries directly in `dir` whose owner (TemporaryOwner) is no longer running
// (kill(pid, 0) says ESRCH): the leftovers of a process killed while writing, and never a live
// writer's (another process writing into the same directory keeps its own). Best effort; returns
// how many were removed.
int RemoveDeadTemporaries(const std::string& dir);
// The same for one file's temporaries only ("<path>.tmp.<pid>"): what AtomicFileWriter removes
// before it writes `path`, so that a writer killed before its rename leaks only until the next
// write of the same file (a pid since reused by a live process keeps its file until then).
int RemoveDeadTemporariesOf(const std::string& path);

}  // namespace cputrain
