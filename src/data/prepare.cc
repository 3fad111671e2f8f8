#include "data/prepare.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <tbb/global_control.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>

#include "common/error.h"
#include "common/files.h"
#include "data/prepare_output.h"
#include "data/token_file.h"
#include "data/unicode_classes.h"

namespace cputrain::data {
namespace {

struct InputFile {
  std::string path;
  uint64_t size = 0;
  uint64_t start = 0;  // corpus offset of its first byte
};

// A stretch of one file that goes to one output and starts a document.
struct Region {
  std::size_t file;
  uint64_t begin, end;  // file offsets
  bool val;
};

struct Chunk {
  std::string text;
  std::size_t file = 0;
  uint64_t file_offset = 0;  // of text[0]
  bool doc_start = false;    // text[0] starts a document (a region's first byte)
  bool doc_end = false;      // the text ends a document (a region's last byte)
  bool val = false;
  // Filled by the tokenizing stage:
  std::vector<uint32_t> tokens;
  uint64_t documents = 0;
  std::exception_ptr error;  // rethrown by the writer, in corpus order
};

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Close(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  void Reset(int fd) {
    Close();
    fd_ = fd;
  }
  int get() const { return fd_; }

 private:
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_;
};

std::vector<InputFile> StatInputs(const std::vector<std::string>& paths) {
  if (paths.empty()) {
    throw InputError("no input files given", "pass one or more text files after the options");
  }
  std::vector<InputFile> files;
  uint64_t total = 0;
  for (const std::string& path : paths) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      throw InputError(fmt::format("cannot read input '{}': {}", path, std::strerror(errno)),
                       "check the path");
    }
    if (S_ISDIR(st.st_mode)) {
      throw InputError(fmt::format("input '{}' is a directory, not a text file", path),
                       fmt::format("pass the files in it, e.g. {}/*.txt", path));
    }
    if (!S_ISREG(st.st_mode)) {
      throw InputError(fmt::format("input '{}' is not a regular file", path),
                       "prepare-data needs each input's size up front to place the validation "
                       "split; save the stream to a file first");
    }
    if (::access(path.c_str(), R_OK) != 0) {
      throw InputError(fmt::format("cannot read input '{}': {}", path, std::strerror(errno)),
                       "check the file's permissions");
    }
    files.push_back({path, static_cast<uint64_t>(st.st_size), total});
    total += static_cast<uint64_t>(st.st_size);
  }
  if (total == 0) {
    throw InputError(
        fmt::format("the corpus is empty: the {} input file(s) hold no bytes", files.size()),
        "pass files that contain text");
  }
  return files;
}

// Reads up to n bytes at `offset` of an open file into *out (appending); returns bytes read.
std::size_t ReadAt(int fd, const std::string& path, uint64_t offset, std::size_t n,
                   std::string* out) {
  std::size_t old = out->size();
  out->resize(old + n);
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, out->data() + old + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      throw RuntimeError(fmt::format("reading '{}' failed: {}", path, std::strerror(errno)));
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  out->resize(old + got);
  return got;
}

int OpenInput(const InputFile& f) {
  int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw InputError(fmt::format("cannot read input '{}': {}", f.path, std::strerror(errno)),
                     "check the path and permissions");
  }
  return fd;
}

// Where a document may be cut (Tokenizer::IsSafeCut); null: nowhere.
using SafeCut = std::function<bool(std::string_view, std::size_t)>;

// The first p >= target where safe(text, p) holds (a file's first byte always does), for a
// corpus without line breaks to cut at; `total` if there is none.
uint64_t FirstSafeCut(const std::vector<InputFile>& files, uint64_t target, uint64_t total,
                      SafeCut safe) {
  for (const InputFile& f : files) {
    if (f.size == 0 || f.start + f.size <= target) continue;
    if (f.start >= target) return f.start;
    Fd fd(OpenInput(f));
    // From the byte before the target: safe() looks at the byte before the cut.
    for (uint64_t offset = target - f.start - 1; offset < f.size;) {
      std::string block;
      const std::size_t got = ReadAt(fd.get(), f.path, offset, 1 << 16, &block);
      if (got < 2) break;
      for (std::size_t i = 1; i < got; ++i) {
        if (safe(block, i)) return f.start + offset + i;
      }
      offset += got - 1;
    }
  }
  return total;
}

// The corpus offset where val.bin starts: the first line start at or after T - floor(f*T), or
// (safe != null, no line start there) the first token boundary.
uint64_t FindValCut(const std::vector<InputFile>& files, uint64_t total, double fraction,
                    SafeCut safe) {
  auto val_bytes = static_cast<uint64_t>(std::floor(static_cast<long double>(fraction) * total));
  if (val_bytes == 0) {
    throw InputError(
        fmt::format("--val-fraction {} of a {}-byte corpus is less than one byte", fraction, total),
        "give a larger corpus or fraction, or --val-fraction 0 for no validation split");
  }
  uint64_t target = total - val_bytes;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const InputFile& f = files[i];
    if (f.size == 0 || f.start + f.size <= target) continue;
    if (f.start >= target) return f.start;  // a file's first byte is a line start
    // The first '\n' at or after local offset target - start - 1 that is not the file's last
    // byte ends the line before the cut.
    Fd fd(OpenInput(f));
    uint64_t offset = target - f.start - 1;
    std::string block;
    while (offset < f.size) {
      block.clear();
      std::size_t got = ReadAt(fd.get(), f.path, offset, 1 << 16, &block);
      if (got == 0) break;
      std::size_t nl = block.find('\n');
      if (nl != std::string::npos) {
        uint64_t line_start = offset + nl + 1;
        if (line_start < f.size) return f.start + line_start;
        break;  // the newline ends the file: the next file starts the next line
      }
      offset += got;
    }
  }
  if (safe != nullptr) {
    const uint64_t cut = FirstSafeCut(files, target, total, safe);
    if (cut < total) return cut;
  }
  throw InputError(
      fmt::format("--val-fraction {} would leave val.bin empty: the last {} bytes of the corpus "
                  "hold no line start to cut at (the split is made at a line start so that no "
                  "line is shared by train.bin and val.bin)",
                  fraction, val_bytes),
      "add more text or line breaks, raise --val-fraction, or pass --val-fraction 0 for no "
      "validation split");
}

std::vector<Region> MakeRegions(const std::vector<InputFile>& files, uint64_t val_cut) {
  std::vector<Region> regions;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const InputFile& f = files[i];
    if (f.size == 0) continue;
    uint64_t end = f.start + f.size;
    if (end <= val_cut) {
      regions.push_back({i, 0, f.size, false});
    } else if (f.start >= val_cut) {
      regions.push_back({i, 0, f.size, true});
    } else {
      regions.push_back({i, 0, val_cut - f.start, false});
      regions.push_back({i, val_cut - f.start, f.size, true});
    }
  }
  return regions;
}

// Cuts the regions into chunks of about `chunk_bytes`, at positions where `safe(text, pos)`.
// Runs on one thread (the pipeline's first, serial stage).
class ChunkReader {
 public:
  ChunkReader(const std::vector<InputFile>& files, std::vector<Region> regions,
              std::size_t chunk_bytes, SafeCut safe)
      : files_(files), regions_(std::move(regions)), chunk_bytes_(chunk_bytes), safe_(safe) {}

  // Fills *chunk with the next chunk (reusing its buffer); false when the corpus is exhausted.
  bool Next(Chunk* chunk) {
    while (true) {
      if (region_ >= regions_.size()) return false;
      const Region& r = regions_[region_];
      if (!opened_) {
        if (open_file_ != r.file) {
          fd_.Reset(OpenInput(files_[r.file]));
          open_file_ = r.file;
        }
        opened_ = true;
        emit_offset_ = read_offset_ = r.begin;
        carry_.clear();
        first_ = true;
      }
      if (!carry_.empty() || read_offset_ < r.end) break;
      ++region_;
      opened_ = false;
    }
    const Region& r = regions_[region_];
    std::string& text = chunk->text;
    text.assign(carry_);
    // One byte beyond the chunk tells whether its end is a safe cut.
    Fill(&text, chunk_bytes_ + 1);
    std::size_t cut = 0;
    if (read_offset_ == r.end && text.size() <= chunk_bytes_) {
      cut = text.size();
    } else {
      // Here text holds chunk_bytes_ + 1 bytes: look back from the nominal end...
      for (std::size_t p = chunk_bytes_; p > 0 && cut == 0; --p) {
        if (safe_(text, p)) cut = p;
      }
      // ...and if there is no safe place, forward, a chunk at a time, up to the region's end.
      std::size_t searched = chunk_bytes_;
      while (cut == 0) {
        if (read_offset_ == r.end) {
          cut = text.size();
          break;
        }
        Fill(&text, text.size() + chunk_bytes_);
        for (std::size_t p = searched + 1; p < text.size() && cut == 0; ++p) {
          if (safe_(text, p)) cut = p;
        }
        searched = text.size() - 1;
      }
    }
    carry_.assign(text, cut, std::string::npos);
    text.resize(cut);
    chunk->file = r.file;
    chunk->file_offset = emit_offset_;
    chunk->doc_start = first_;
    chunk->doc_end = carry_.empty() && read_offset_ == r.end;
    chunk->val = r.val;
    emit_offset_ += cut;
    first_ = false;
    return true;
  }

 private:
  // Reads the current region until *text holds `want` bytes or the region ends.
  void Fill(std::string* text, std::size_t want) {
    const Region& r = regions_[region_];
    if (text->size() >= want || read_offset_ >= r.end) return;
    auto n =
        static_cast<std::size_t>(std::min<uint64_t>(want - text->size(), r.end - read_offset_));
    std::size_t got = ReadAt(fd_.get(), files_[r.file].path, read_offset_, n, text);
    if (got != n) {
      throw RuntimeError(fmt::format("input '{}' shrank while it was being read (expected {} "
                                     "bytes)",
                                     files_[r.file].path, files_[r.file].size),
                         "do not change input files while prepare-data runs");
    }
    read_offset_ += n;
  }

  const std::vector<InputFile>& files_;
  std::vector<Region> regions_;
  std::size_t chunk_bytes_;
  SafeCut safe_;
  std::size_t region_ = 0;
  bool opened_ = false;
  std::size_t open_file_ = SIZE_MAX;
  Fd fd_;
  uint64_t emit_offset_ = 0;  // file offset of the next byte to hand out
  uint64_t read_offset_ = 0;  // file offset up to which the region has been read
  std::string carry_;         // bytes read past the last cut (file offsets emit_offset_..)
  bool first_ = true;
};

bool IsBlankLine(std::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return false;
  }
  return true;
}

// The tokenizing stage: fills chunk->tokens and chunk->documents, or chunk->error. `frame`
// marks each document (DocumentFrame).
void TokenizeChunk(const Tokenizer& tok, const SpecialFrame& frame, bool split_on_blank_lines,
                   const std::vector<InputFile>& files, Chunk* chunk) {
  try {
    const std::string& text = chunk->text;
    if (tok.reads_utf8()) {
      std::size_t bad = FindInvalidUtf8(text);
      if (bad != std::string_view::npos) {
        std::string bytes;
        for (std::size_t i = bad; i < std::min(bad + 4, text.size()); ++i) {
          bytes += fmt::format("{}{:02x}", bytes.empty() ? "" : " ",
                               static_cast<unsigned char>(text[i]));
        }
        throw InputError(
            fmt::format("input '{}' is not valid UTF-8 at byte {} (bytes {})",
                        files[chunk->file].path, chunk->file_offset + bad, bytes),
            fmt::format("the {} tokenizer reads UTF-8 text: convert the file (e.g. iconv -f "
                        "latin1 -t utf-8) or use --tokenizer bytes",
                        tok.name()));
      }
    }
    static thread_local std::vector<int> ids;
    ids.clear();
    auto open_doc = [&] {
      ++chunk->documents;
      ids.insert(ids.end(), frame.before.begin(), frame.before.end());
    };
    auto close_doc = [&] { ids.insert(ids.end(), frame.after.begin(), frame.after.end()); };
    if (!split_on_blank_lines) {
      if (chunk->doc_start) open_doc();
      tok.Encode(text, &ids);
      if (chunk->doc_end) close_doc();
    } else {
      // A chunk that does not start a region was cut just after non-whitespace, so its first
      // line continues a non-blank line of the open document.
      bool open = !chunk->doc_start;
      bool continued = !chunk->doc_start;
      std::size_t doc = 0;
      std::string_view all = text;
      for (std::size_t pos = 0; pos < all.size();) {
        std::size_t nl = all.find('\n', pos);
        std::size_t end = nl == std::string_view::npos ? all.size() : nl + 1;
        bool blank = !continued && IsBlankLine(all.substr(pos, end - pos));
        continued = false;
        if (blank && open) {
          tok.Encode(all.substr(doc, pos - doc), &ids);
          close_doc();
          open = false;
        } else if (!blank && !open) {
          open_doc();
          open = true;
          doc = pos;
        }
        pos = end;
      }
      if (open) {
        tok.Encode(all.substr(doc), &ids);
        if (chunk->doc_end) close_doc();
      }
    }
    chunk->tokens.assign(ids.begin(), ids.end());
  } catch (...) {
    chunk->error = std::current_exception();
  }
}

// Every option and tokenizer requirement, before any file is opened.
void CheckOptions(const PrepareOptions& options, const Tokenizer& tokenizer) {
  if (!(options.val_fraction >= 0 && options.val_fraction < 1)) {
    throw InputError(fmt::format("--val-fraction {} is outside [0, 1)", options.val_fraction),
                     "use e.g. 0.05 for 5% validation data, or 0 for none");
  }
  if (options.chunk_bytes == 0) throw InputError("chunk size must be at least one byte");
  if (options.threads < 0) {
    throw InputError(fmt::format("--threads {} is negative", options.threads),
                     "give a thread count, or leave --threads out to use every core");
  }
  const SpecialFrame frame = DocumentFrame(tokenizer);
  if (options.split_on_blank_lines && frame.before.empty() && frame.after.empty()) {
    throw InputError(
        fmt::format("--split-on-blank-lines needs a tokenizer with an end-of-text, bos or eos "
                    "token to mark documents; '{}' has none",
                    tokenizer.name()),
        "use --tokenizer gpt2 (or a tokenizer.json with such tokens), or leave out "
        "--split-on-blank-lines");
  }
  if (options.out_dir.empty()) throw InputError("no output directory given", "pass -o DIR");
}

void ThrowIfStopped(const PrepareOptions& options) {
  if (options.cancel != nullptr && options.cancel->requested()) {
    throw RuntimeError("interrupted; no train.bin or val.bin was written");
  }
}

// Where the pipeline's last stage puts each chunk's tokens.
struct Sinks {
  SplitWriter* train;
  SplitWriter* val;  // null without a validation split
  PrepareResult* result;
  PrepareProgress* progress;
  std::chrono::steady_clock::time_point start;
};

// Read (in order) -> tokenize (in parallel) -> write (in order), stopping at a StopToken.
void RunPipeline(const PrepareOptions& options, const Tokenizer& tokenizer,
                 const std::vector<InputFile>& files, ChunkReader& reader, Sinks out) {
  const SpecialFrame frame = DocumentFrame(tokenizer);
  // At most `live` chunks are in flight and the writer takes them in order, so chunk i can
  // reuse slot i % live (and its buffers): when it is read, chunk i - live has been written.
  // The slots outlive the pipeline, so chunks in flight when an error cancels it are freed.
  const auto live = static_cast<std::size_t>(2 * tbb::this_task_arena::max_concurrency() + 2);
  std::vector<Chunk> slots(live);
  std::size_t next_slot = 0;
  auto read = [&](tbb::flow_control& fc) -> Chunk* {
    ThrowIfStopped(options);
    Chunk* chunk = &slots[next_slot++ % live];
    chunk->tokens.clear();
    chunk->documents = 0;
    chunk->error = nullptr;
    if (!reader.Next(chunk)) {
      fc.stop();
      return nullptr;
    }
    return chunk;
  };
  auto tokenize = [&](Chunk* chunk) {
    TokenizeChunk(tokenizer, frame, options.split_on_blank_lines, files, chunk);
    return chunk;
  };
  auto write = [&](Chunk* chunk) {
    if (chunk->error) std::rethrow_exception(chunk->error);
    SplitWriter* to = chunk->val ? out.val : out.train;
    to->Append(chunk->tokens.data(), chunk->tokens.size());
    (chunk->val ? out.result->val_tokens : out.result->train_tokens) += chunk->tokens.size();
    out.result->documents += chunk->documents;
    out.progress->bytes_done += chunk->text.size();
    out.progress->tokens += chunk->tokens.size();
    out.progress->seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - out.start).count();
    if (options.on_progress) options.on_progress(*out.progress);
  };
  tbb::parallel_pipeline(
      live, tbb::make_filter<void, Chunk*>(tbb::filter_mode::serial_in_order, read) &
                tbb::make_filter<Chunk*, Chunk*>(tbb::filter_mode::parallel, tokenize) &
                tbb::make_filter<Chunk*, void>(tbb::filter_mode::serial_in_order, write));
}

// Runs the text pipeline on `threads` (0 = oneTBB's default).
void RunWithThreads(int threads, const std::function<void()>& run) {
  if (threads <= 0) return run();
  // oneTBB caps its workers at the core count unless told otherwise; an explicit thread count
  // (tests ask for more threads than cores) is honoured for this run.
  tbb::global_control allow(tbb::global_control::max_allowed_parallelism,
                            static_cast<std::size_t>(threads));
  tbb::task_arena arena(threads);
  arena.execute(run);
}

// The inputs with "-" replaced by the spooled stdin.
std::vector<std::string> ResolveInputs(const PrepareOptions& options,
                                       std::optional<SpooledStdin>* spool) {
  std::vector<std::string> inputs = options.inputs;
  for (std::string& in : inputs) {
    if (in != "-") continue;
    if (*spool) {
      throw InputError("'-' (stdin) is given twice", "standard input can be read only once");
    }
    spool->emplace(options.out_dir);
    in = (*spool)->path();
  }
  return inputs;
}

}  // namespace

PrepareResult PrepareData(const PrepareOptions& options, const Tokenizer& tokenizer) {
  const auto start = std::chrono::steady_clock::now();
  CheckOptions(options, tokenizer);
  MakeDirs(options.out_dir);
  // A killed run's temporaries (NAME.bin.tmp.PID, .stdin.tmp.PID), as train removes its own.
  RemoveDeadTemporaries(options.out_dir);
  std::string name = options.shard_name;
  if (name.empty()) {
    name = std::filesystem::absolute(options.out_dir).lexically_normal().filename().string();
    if (name.empty()) name = std::filesystem::absolute(options.out_dir).parent_path().filename();
  }
  const std::vector<std::string> old_outputs = ExistingOutputs(options.out_dir, name);
  if (!old_outputs.empty() && !options.overwrite) {
    throw InputError(
        fmt::format(
            "'{}' already holds token files of an earlier run ({}{})", options.out_dir,
            std::filesystem::path(old_outputs.front()).filename().string(),
            old_outputs.size() > 1 ? fmt::format(" and {} more", old_outputs.size() - 1) : ""),
        "pass --overwrite to replace them (the earlier run's files this run does not rewrite are "
        "removed, so a glob such as DIR/*_train_*.bin sees only the new ones), or choose another "
        "-o");
  }
  ThrowIfStopped(options);
  std::optional<SpooledStdin> spool;
  std::vector<InputFile> files = StatInputs(ResolveInputs(options, &spool));
  const bool jsonl = !options.jsonl_field.empty();
  SafeCut safe;
  if (!jsonl) {
    safe = [&tokenizer](std::string_view text, std::size_t pos) {
      return tokenizer.IsSafeCut(text, pos);
    };
  }
  PrepareResult result;
  result.bytes = files.back().start + files.back().size;
  result.val_cut = options.val_fraction > 0
                       ? FindValCut(files, result.bytes, options.val_fraction, safe)
                       : result.bytes;

  const int version = TokenFileVersionFor(tokenizer.vocab_size());
  SplitWriter train(options.out_dir, name, "train", options.shard_tokens, version);
  std::optional<SplitWriter> val;
  if (options.val_fraction > 0) {
    val.emplace(options.out_dir, name, "val", options.shard_tokens, version);
  }

  if (jsonl) {
    std::vector<std::string> paths;
    std::vector<uint64_t> starts;
    for (const InputFile& f : files) paths.push_back(f.path), starts.push_back(f.start);
    RunWithThreads(options.threads, [&] {
      TokenizeJsonl(paths, starts, options.jsonl_field, result.val_cut, tokenizer, train,
                    val ? &*val : nullptr, &result, options);
    });
  } else {
    ChunkReader reader(files, MakeRegions(files, result.val_cut), options.chunk_bytes, safe);
    PrepareProgress progress;
    progress.bytes_total = result.bytes;
    RunWithThreads(options.threads, [&] {
      RunPipeline(options, tokenizer, files, reader,
                  {&train, val ? &*val : nullptr, &result, &progress, start});
    });
  }
  // Every step that can fail, for every file, before any is renamed.
  train.Finish();
  if (val) val->Finish();
  ThrowIfStopped(options);  // the last point where nothing is in place yet
  train.Commit();
  if (val) val->Commit();
  if (options.overwrite) {
    // The earlier run's files this one did not rewrite (more shards, a val.bin): stale now.
    std::vector<std::string> kept;
    for (const SplitWriter* w : {&train, val ? &*val : nullptr}) {
      if (w == nullptr) continue;
      for (const std::string& path : w->paths()) {
        kept.push_back(std::filesystem::path(path).filename().string());
      }
    }
    for (const std::string& path : old_outputs) {
      const std::string file = std::filesystem::path(path).filename().string();
      if (std::find(kept.begin(), kept.end(), file) == kept.end()) std::remove(path.c_str());
    }
    SyncDir(options.out_dir);
  }
  result.train_path = train.Describe();
  result.train_files = train.files();
  if (val) {
    result.val_path = val->Describe();
    result.val_files = val->files();
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace cputrain::data
