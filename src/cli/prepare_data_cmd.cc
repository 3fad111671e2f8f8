// `cputrain-numa prepare-data`: text files -> DIR/train.bin and DIR/val.bin (docs/data.md).
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/signals.h"
#include "common/error.h"
#include "common/log.h"
#include "common/stop.h"
#include "data/prepare.h"
#include "data/token_file.h"
#include "data/tokenizer.h"

namespace cputrain::cli {
namespace {

std::string Duration(double seconds) {
  auto s = static_cast<long>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{}:{:02}", s / 60, s % 60);
}

// A progress bar redrawn in place when stderr is a terminal, otherwise a plain line every 10 s.
class ProgressReporter {
 public:
  ProgressReporter() : tty_(::isatty(STDERR_FILENO) == 1) {}

  void operator()(const data::PrepareProgress& p) {
    bool done = p.bytes_done == p.bytes_total;
    double interval = tty_ ? 0.1 : 10.0;
    if (!done && p.seconds - last_ < interval) return;
    last_ = p.seconds;
    double mb = p.bytes_done / 1e6, total_mb = p.bytes_total / 1e6;
    double rate = p.seconds > 0 ? mb / p.seconds : 0;
    double eta = rate > 0 ? (total_mb - mb) / rate : 0;
    double frac = p.bytes_total > 0 ? static_cast<double>(p.bytes_done) / p.bytes_total : 1;
    if (tty_) {
      constexpr int kWidth = 30;
      int filled = std::clamp(static_cast<int>(frac * kWidth), 0, kWidth);
      std::fprintf(stderr, "\r%3d%% [%s%s] %.1f/%.1f MB  %.1f MB/s  ETA %s ",
                   static_cast<int>(frac * 100), std::string(filled, '#').c_str(),
                   std::string(kWidth - filled, ' ').c_str(), mb, total_mb, rate,
                   Duration(eta).c_str());
      if (done) std::fputc('\n', stderr);
      std::fflush(stderr);
      drawn_ = !done;
    } else if (!done) {
      log::Info("prepare-data: {:.0f}% ({:.1f} of {:.1f} MB), {:.1f} MB/s, ETA {}", frac * 100, mb,
                total_mb, rate, Duration(eta));
    }
  }

  // Ends a half-drawn bar so that an error message starts on its own line.
  void Abandon() {
    if (drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }

 private:
  bool tty_;
  bool drawn_ = false;
  double last_ = 0;  // the first plain line comes after one interval
};

}  // namespace

void AddPrepareDataCommand(CLI::App& app) {
  struct Opts {
    std::string tokenizer;
    data::PrepareOptions prepare;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "prepare-data",
      "Tokenize text files (- for stdin) or JSON lines (--jsonl) into DIR/train.bin and "
      "DIR/val.bin, or numbered shards (--shard-tokens), llm.c token files (uint32 ids, version "
      "2, for vocabularies above 65536): each file (or JSON line) is a document, preceded by "
      "<|endoftext|> for gpt2, framed by bos/eos for a tokenizer.json; val is the corpus's last "
      "--val-fraction, cut at a line start (docs/data.md)");
  cmd->add_option("--tokenizer", opts->tokenizer,
                  "gpt2 (GPT-2 BPE, 50257 tokens), bytes (one token per byte, 256), a Hugging "
                  "Face tokenizer.json or a directory holding one (+ tokenizer_config.json), or "
                  "a directory with GPT-2's vocab.json + merges.txt")
      ->required();
  cmd->add_option("--val-fraction", opts->prepare.val_fraction,
                  "fraction of the corpus (bytes, from its end) for val.bin; 0 = no val.bin")
      ->capture_default_str();
  cmd->add_flag("--split-on-blank-lines", opts->prepare.split_on_blank_lines,
                "each run of non-blank lines is a document of its own (needs an end-of-text, bos "
                "or eos token); blank lines are dropped");
  cmd->add_option("--threads", opts->prepare.threads, "tokenizing threads; 0 = every core");
  cmd->add_option("--jsonl", opts->prepare.jsonl_field,
                  "inputs are JSON lines (HF datasets' to_json): one document per line, its text "
                  "in this string field, e.g. --jsonl text");
  cmd->add_option("--shard-tokens", opts->prepare.shard_tokens,
                  "write llm.c-style shards of this many tokens, NAME_train_000000.bin ... and "
                  "NAME_val_000000.bin ... (train on them with data.train: 'DIR/NAME_train_*.bin')")
      ->check(CLI::Range(uint64_t{1}, static_cast<uint64_t>(data::kTokenFileMaxTokens)))
      ->default_str("");
  cmd->add_option("--shard-name", opts->prepare.shard_name,
                  "NAME of the shard files (default: the output directory's name)");
  cmd->add_option("-o,--out", opts->prepare.out_dir, "output directory (created if missing)")
      ->required();
  cmd->add_flag("--overwrite", opts->prepare.overwrite,
                "replace the token files of an earlier run in the output directory (train.bin, "
                "val.bin, NAME's shards), removing those this run does not rewrite; without it "
                "such files are refused");
  cmd->add_option("inputs", opts->prepare.inputs, "text files, in corpus order; - reads stdin")
      ->required();
  cmd->callback([opts] {
    // First, before the vocabulary loads (seconds under a sanitizer): a signal that arrives
    // while SIGINT is still ignored, as a non-interactive shell's background job inherits it,
    // is lost; once caught, the token keeps it until PrepareData polls it.
    StopToken stop;
    StopOnSignals on_signals(stop);
    std::unique_ptr<data::Tokenizer> tokenizer = data::MakeTokenizer(opts->tokenizer);
    ProgressReporter reporter;
    data::PrepareOptions prepare = opts->prepare;
    prepare.cancel = &stop;
    prepare.on_progress = [&reporter](const data::PrepareProgress& p) { reporter(p); };
    data::PrepareResult r;
    try {
      if (stop.requested()) throw RuntimeError("interrupted during start-up");
      r = data::PrepareData(prepare, *tokenizer);
    } catch (...) {
      reporter.Abandon();
      // A stop asked for by a signal is not an error: said as such, exit 128 + signal.
      if (stop.requested()) {
        throw StopExit(128 + stop.reason(),
                       fmt::format("stopped by {}; no train.bin or val.bin was written",
                                   SignalName(stop.reason())));
      }
      throw;
    }
    auto files = [](std::size_t n) { return n > 1 ? fmt::format(" in {} shards", n) : ""; };
    std::string val = r.val_path.empty() ? std::string("no validation split (--val-fraction 0)")
                                         : fmt::format("{}: {} tokens{}", r.val_path, r.val_tokens,
                                                       files(r.val_files));
    std::printf("wrote %s: %llu tokens%s; %s\n", r.train_path.c_str(),
                static_cast<unsigned long long>(r.train_tokens), files(r.train_files).c_str(),
                val.c_str());
    std::printf("%s tokenizer, %llu documents, %.1f MB in %.2f s (%.1f MB/s)\n",
                tokenizer->name().c_str(), static_cast<unsigned long long>(r.documents),
                r.bytes / 1e6, r.seconds, r.seconds > 0 ? r.bytes / 1e6 / r.seconds : 0.0);
  });
}

}  // namespace cputrain::cli
