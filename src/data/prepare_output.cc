#include "data/prepare_output.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace cputrain::data {

SplitWriter::SplitWriter(std::string dir, std::string name, std::string split,
                         uint64_t shard_tokens, int version)
    : dir_(std::move(dir)),
      name_(std::move(name)),
      split_(std::move(split)),
      shard_tokens_(shard_tokens),
      version_(version) {
  // One file: opened now, so an unwritable directory is reported before any work.
  if (shard_tokens_ == 0) {
    shards_.push_back(std::make_unique<TokenFileWriter>(ShardPath(0), version_));
  }
}

std::string SplitWriter::ShardPath(std::size_t i) const {
  const std::filesystem::path dir(dir_);
  if (shard_tokens_ == 0) return (dir / (split_ + ".bin")).string();
  return (dir / fmt::format("{}_{}_{:06d}.bin", name_, split_, i)).string();
}

std::string SplitWriter::Describe() const {
  if (shard_tokens_ == 0) return ShardPath(0);
  return (std::filesystem::path(dir_) / fmt::format("{}_{}_*.bin", name_, split_)).string();
}

std::vector<std::string> SplitWriter::paths() const {
  std::vector<std::string> all;
  for (std::size_t i = 0; i < shards_.size(); ++i) all.push_back(ShardPath(i));
  return all;
}

void SplitWriter::Append(const uint32_t* tokens, std::size_t n) {
  while (n > 0) {
    if (shard_tokens_ > 0 && (shards_.empty() || shards_.back()->count() == shard_tokens_)) {
      // The full shard is finished (written, fsynced, closed) before the next opens.
      if (!shards_.empty()) shards_.back()->Finish();
      shards_.push_back(std::make_unique<TokenFileWriter>(ShardPath(shards_.size()), version_));
    }
    TokenFileWriter& w = *shards_.back();
    const std::size_t room =
        shard_tokens_ > 0 ? static_cast<std::size_t>(shard_tokens_ - w.count()) : n;
    const std::size_t take = std::min(n, room);
    w.Append(tokens, take);
    tokens += take;
    n -= take;
    tokens_ += take;
  }
}

void SplitWriter::Finish() {
  if (shards_.empty()) {
    throw InputError(fmt::format("the {} split is empty: no tokens for {}", split_, Describe()),
                     "give more text, or a smaller --val-fraction");
  }
  for (auto& w : shards_) w->Finish();
}

void SplitWriter::Commit() {
  for (auto& w : shards_) w->Commit();
}

std::vector<std::string> ExistingOutputs(const std::string& dir, const std::string& name) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const std::filesystem::directory_entry& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    bool ours = f == "train.bin" || f == "val.bin";
    for (const char* split : {"_train_", "_val_"}) {
      const std::string prefix = name + split;
      if (ours || f.size() < prefix.size() + 6 + 4 || f.compare(0, prefix.size(), prefix) != 0 ||
          f.compare(f.size() - 4, 4, ".bin") != 0) {
        continue;
      }
      const std::string digits = f.substr(prefix.size(), f.size() - 4 - prefix.size());
      ours = std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    }
    if (ours) found.push_back(e.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

SpooledStdin::SpooledStdin(const std::string& dir) {
  path_ = (std::filesystem::path(dir) / fmt::format(".stdin.tmp.{}", ::getpid())).string();
  std::FILE* out = std::fopen(path_.c_str(), "wb");
  if (out == nullptr) {
    throw InputError(fmt::format("cannot write '{}': {}", path_, std::strerror(errno)),
                     "the output directory must be writable (stdin is spooled there)");
  }
  char buf[1 << 16];
  std::size_t n;
  bool ok = true;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) ok &= std::fwrite(buf, 1, n, out) == n;
  ok &= std::ferror(stdin) == 0;
  ok &= std::fclose(out) == 0;
  if (!ok) {
    std::remove(path_.c_str());
    throw RuntimeError(fmt::format("spooling stdin to '{}' failed", path_),
                       "check the free space of the output directory");
  }
}

SpooledStdin::~SpooledStdin() { std::remove(path_.c_str()); }

SpecialFrame DocumentFrame(const Tokenizer& tokenizer) {
  SpecialFrame frame = tokenizer.special_frame();
  if (frame.before.empty() && frame.after.empty()) {
    const int marker = tokenizer.eot_token() >= 0 ? tokenizer.eot_token() : tokenizer.bos_token();
    if (marker >= 0) frame.before.push_back(marker);
  }
  return frame;
}

namespace {

[[noreturn]] void BadLine(const std::string& path, uint64_t line, const std::string& what,
                          const std::string& field) {
  throw InputError(fmt::format("input '{}' line {}: {}", path, line, what),
                   fmt::format("--jsonl {} reads one JSON object per line with the document's "
                               "text in the string field \"{}\" (HF datasets' to_json writes "
                               "such files)",
                               field, field));
}

}  // namespace

void TokenizeJsonl(const std::vector<std::string>& paths, const std::vector<uint64_t>& starts,
                   const std::string& field, uint64_t val_cut, const Tokenizer& tokenizer,
                   SplitWriter& train, SplitWriter* val, PrepareResult* result,
                   const PrepareOptions& options) {
  const SpecialFrame frame = DocumentFrame(tokenizer);
  std::vector<int> ids;
  std::vector<uint32_t> out;
  for (std::size_t f = 0; f < paths.size(); ++f) {
    std::ifstream in(paths[f], std::ios::binary);
    if (!in) throw InputError(fmt::format("cannot read input '{}'", paths[f]), "check the path");
    std::string line;
    uint64_t offset = starts[f], number = 0;
    while (std::getline(in, line)) {
      const uint64_t at = offset;
      offset += line.size() + 1;
      ++number;
      if (options.cancel != nullptr && options.cancel->requested()) {
        throw RuntimeError("interrupted; no token file was written");
      }
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
      nlohmann::json doc;
      try {
        doc = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        BadLine(paths[f], number, fmt::format("not JSON ({})", e.what()), field);
      }
      if (!doc.is_object()) BadLine(paths[f], number, "not a JSON object", field);
      const auto it = doc.find(field);
      if (it == doc.end() || !it->is_string())
        BadLine(paths[f], number, fmt::format("no string field \"{}\"", field), field);
      ids.assign(frame.before.begin(), frame.before.end());
      tokenizer.Encode(it->get_ref<const std::string&>(), &ids);
      ids.insert(ids.end(), frame.after.begin(), frame.after.end());
      out.assign(ids.begin(), ids.end());
      const bool to_val = val != nullptr && at >= val_cut;
      (to_val ? *val : train).Append(out.data(), out.size());
      (to_val ? result->val_tokens : result->train_tokens) += out.size();
      ++result->documents;
    }
  }
}

}  // namespace cputrain::data
