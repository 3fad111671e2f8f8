// prepare-data's outputs and extra sources (internal to src/data; prepare.h documents the
// behaviour): one split (train or val) written as one token file or as numbered shards, stdin
// spooled to a file, and JSON-lines input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/prepare.h"
#include "data/token_file.h"

namespace cputrain::data {

// One split's output: DIR/<split>.bin, or with shard_tokens > 0 the shards
// DIR/<name>_<split>_000000.bin, _000001, ... of exactly shard_tokens tokens each (the last one
// shorter). A shard is opened when its first token arrives, so none is empty, and finished
// (closed) when the next one opens: one file open per split whatever the shard count. Finish and
// Commit as TokenFileWriter, for every shard.
class SplitWriter {
 public:
  // Token files of `version` (TokenFileVersionFor the tokenizer's vocabulary).
  SplitWriter(std::string dir, std::string name, std::string split, uint64_t shard_tokens,
              int version);
  void Append(const uint32_t* tokens, std::size_t n);
  void Finish();  // throws InputError if nothing was written (as TokenFileWriter)
  void Commit();
  uint64_t tokens() const { return tokens_; }
  std::size_t files() const { return shards_.size(); }
  // Every file this writer writes (after Commit: has written).
  std::vector<std::string> paths() const;
  // The file, or a glob of the shards ("DIR/name_train_*.bin"), for messages and data.train.
  std::string Describe() const;

 private:
  std::string ShardPath(std::size_t i) const;
  std::string dir_, name_, split_;
  uint64_t shard_tokens_;
  int version_;
  uint64_t tokens_ = 0;
  std::vector<std::unique_ptr<TokenFileWriter>> shards_;
};

// The token files prepare-data writes into `dir` for shard prefix `name`, present there now:
// train.bin, val.bin and NAME_train_NNNNNN.bin, NAME_val_NNNNNN.bin (six or more digits),
// sorted. What a run into `dir` would mix with (docs/data.md, "Re-running prepare-data").
std::vector<std::string> ExistingOutputs(const std::string& dir, const std::string& name);

// Copies standard input to a temporary file in `dir` (prepare-data needs every input's size up
// front to place the validation split), removed when this object dies.
class SpooledStdin {
 public:
  explicit SpooledStdin(const std::string& dir);
  ~SpooledStdin();
  SpooledStdin(const SpooledStdin&) = delete;
  SpooledStdin& operator=(const SpooledStdin&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// How documents are marked in the token stream (docs/data.md): the special tokens the
// tokenizer adds with add_special_tokens=True (special_frame(): bos before each document,
// eos after it, as the tokenizer.json's template or tokenizer_config.json says); a tokenizer
// that adds none gets its end-of-text token (gpt2's <|endoftext|>, a tokenizer.json's eos),
// else its bos, before each document, as llm.c's data scripts do; none for bytes.
SpecialFrame DocumentFrame(const Tokenizer& tokenizer);

// JSON lines: each non-empty line of each input is a JSON object whose string `field` is one
// document. Lines starting at corpus byte >= val_cut go to `val` (null: none). Tokenizes on the
// calling thread. Throws InputError naming the file and line of a line that is not a JSON object
// with a string `field`. Adds to result's token and document counts.
void TokenizeJsonl(const std::vector<std::string>& paths, const std::vector<uint64_t>& starts,
                   const std::string& field, uint64_t val_cut, const Tokenizer& tokenizer,
                   SplitWriter& train, SplitWriter* val, PrepareResult* result,
                   const PrepareOptions& options);

}  // namespace cputrain::data
