// prepare-data: text files -> train.bin and val.bin (llm.c token files, token_file.h: version 1
// with uint16 ids when the tokenizer's vocabulary fits, version 2 with uint32 ids above 65,536).
//
// Inputs. Text files, "-" for standard input (spooled to a temporary file in the output
// directory first: the split needs every input's size up front), or with jsonl_field JSON-lines
// files (one JSON object per line, the document's text in the string field jsonl_field, as HF
// datasets' to_json writes them; each line is a document; a bad line is an InputError naming
// its file and line number; tokenized on one thread).
//
// Outputs. DIR/train.bin and DIR/val.bin, or with shard_tokens > 0 llm.c-style numbered shards
// of exactly shard_tokens tokens (the last one shorter): DIR/<name>_train_000000.bin, ... and
// DIR/<name>_val_000000.bin, ...; documents may span two shards (as llm.c's fineweb.py).
//
// Documents. Each input file is one document; with split_on_blank_lines, every run of
// non-blank lines is one (a blank line is empty or holds only spaces, tabs and '\r'; blank lines
// are dropped). Each document is framed by DocumentFrame (prepare_output.h): the special tokens
// the tokenizer adds with add_special_tokens=True (a tokenizer.json's bos before, eos after);
// a tokenizer that adds none gets its end-of-text token (gpt2's <|endoftext|>), else its bos,
// before each document, as llm.c's data scripts do; the bytes tokenizer writes the text as it
// is.
//
// Split. The corpus is the input files in the order given, T bytes in all. It is cut once, at
// the first line start at or after byte T - floor(val_fraction * T) (a file's first byte is a
// line start): everything before goes to train.bin, the rest to val.bin. A corpus whose tail
// holds no line start (text8: one line of 100 MB) is cut at the first token boundary instead
// (Tokenizer::IsSafeCut: for gpt2 before whitespace that follows non-whitespace, for bytes at
// that byte). With JSON
// lines the cut is the first line (document) starting there. A document the cut
// falls in is split, and its tail starts val.bin as a document of its own. So val.bin is the
// last ~val_fraction of the corpus, the same whichever tokenizer or thread count is used.
//
// Parallelism. A reader cuts the corpus into ~chunk_bytes chunks, worker threads tokenize them
// (oneTBB parallel_pipeline), a writer appends them in order; at most a few chunks are in
// flight, so memory does not grow with the corpus. Chunks are cut only where the tokenizer's
// IsSafeCut holds (gpt2: before whitespace that follows non-whitespace; a tokenizer.json with a
// pattern pre-tokenizer: between a letter or number and ASCII whitespace; one whose pipeline
// adds text at a piece's start, e.g. SentencePiece-style: nowhere, so a document is one chunk),
// so the tokens equal those of tokenizing each document whole; a stretch of more than
// chunk_bytes without such a place makes that chunk longer.
//
// Failure. Both files are written through temporaries and renamed only after every token is
// written and fsynced; any error, or a set `cancel`, leaves no train.bin/val.bin behind (an
// existing one from an earlier run is untouched).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/stop.h"
#include "data/tokenizer.h"

namespace cputrain::data {

struct PrepareProgress {
  uint64_t bytes_done = 0;   // input bytes tokenized and written
  uint64_t bytes_total = 0;  // T
  uint64_t tokens = 0;       // written so far, train + val
  double seconds = 0;        // since the start
};

struct PrepareOptions {
  std::vector<std::string> inputs;  // text files ("-": stdin, at most once), in corpus order
  std::string out_dir;              // created if missing; gets train.bin and val.bin
  std::string jsonl_field;          // "" = plain text; else JSON lines, text in this field
  uint64_t shard_tokens = 0;        // 0 = one file per split; else shards of this many tokens
  std::string shard_name;           // shard file prefix; "" = the output directory's name
  double val_fraction = 0.05;       // in [0, 1); 0 writes train.bin only
  bool split_on_blank_lines = false;
  // The token files of an earlier run in out_dir (train.bin, val.bin, this shard_name's shards):
  // false refuses to start (InputError) while any is there; true replaces them, removing those
  // this run does not rewrite once its own files are in place, so no stale shard is left to a
  // glob.
  bool overwrite = false;
  // Tokenizing threads; 0 = every core oneTBB sees. A positive count also sets oneTBB's
  // process-wide max_allowed_parallelism for the duration of the run.
  int threads = 0;
  // Chunk size. The default keeps a few MiB in flight; tests set a few bytes to force many
  // chunk boundaries.
  std::size_t chunk_bytes = std::size_t{1} << 20;
  // Called on the writer thread after each chunk is written.
  std::function<void(const PrepareProgress&)> on_progress;
  // Once a stop is requested — at any point before the files are renamed into place — the run
  // stops with RuntimeError("interrupted") and writes nothing.
  const StopToken* cancel = nullptr;
};

struct PrepareResult {
  std::string train_path;  // the file, or a glob of its shards
  std::string val_path;    // the same; empty when val_fraction == 0
  std::size_t train_files = 0, val_files = 0;
  uint64_t train_tokens = 0;
  uint64_t val_tokens = 0;
  uint64_t documents = 0;  // document starts
  uint64_t bytes = 0;      // T
  uint64_t val_cut = 0;    // corpus byte where val.bin starts; T when there is no val.bin
  double seconds = 0;
};

// Throws InputError for bad options or input (missing file, a directory, not UTF-8 for a
// tokenizer that reads text, with file and byte offset, empty corpus, an empty split, output
// directory not writable), RuntimeError for I/O failures and cancellation.
PrepareResult PrepareData(const PrepareOptions& options, const Tokenizer& tokenizer);

}  // namespace cputrain::data
