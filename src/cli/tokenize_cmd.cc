// `cputrain-numa tokenize`: text lines on stdin -> token ids on stdout, one line each
// (docs/data.md), to check a tokenizer against another implementation or to feed ids elsewhere.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/error.h"
#include "data/tokenizer.h"

namespace cputrain::cli {

void AddTokenizeCommand(CLI::App& app) {
  struct Opts {
    std::string tokenizer;
    bool special = false;
    bool offsets = false;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Read lines of text on stdin and print each one's token ids, space-separated, one line "
      "per input line (the newline is not part of the text; a CR before it is)");
  cmd->add_option("--tokenizer", opts->tokenizer,
                  "gpt2, bytes, a Hugging Face tokenizer.json or a directory holding one (and "
                  "its tokenizer_config.json), a BERT vocab.txt (or a directory holding one), or "
                  "a directory with GPT-2's vocab.json + merges.txt")
      ->required();
  cmd->add_flag("--special", opts->special,
                "add the tokenizer's special tokens around each line, as Hugging Face's "
                "add_special_tokens=True (e.g. Llama's <s> first); special tokens written in "
                "the text are always their ids");
  cmd->add_flag("--offsets", opts->offsets,
                "print each id as id:begin-end, its [begin, end) byte span in the line (WordPiece "
                "tokenizers; special tokens added by --special span 0-0, as Hugging Face's)");
  cmd->callback([opts] {
    std::unique_ptr<data::Tokenizer> tok = data::MakeTokenizer(opts->tokenizer);
    std::vector<int> ids;
    std::vector<data::Offset> offsets;
    std::string line, out;
    char buf[1 << 16];
    bool more = true;
    // Lines of any length, read in blocks; the last one may lack its newline.
    auto emit = [&] {
      ids.clear();
      offsets.clear();
      const data::SpecialFrame& frame = tok->special_frame();
      if (opts->offsets) {
        if (opts->special) ids = frame.before;
        offsets.resize(ids.size());
        tok->EncodeWithOffsets(line, &ids, &offsets);
        if (opts->special) ids.insert(ids.end(), frame.after.begin(), frame.after.end());
        offsets.resize(ids.size());
      } else if (opts->special) {
        tok->EncodeWithSpecial(line, &ids);
      } else {
        tok->Encode(line, &ids);
      }
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i > 0) out.push_back(' ');
        fmt::format_to(std::back_inserter(out), "{}", ids[i]);
        if (opts->offsets)
          fmt::format_to(std::back_inserter(out), ":{}-{}", offsets[i].begin, offsets[i].end);
      }
      out.push_back('\n');
      if (out.size() >= (1 << 16)) {
        if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size()) {
          throw RuntimeError("writing the ids to stdout failed");
        }
        out.clear();
      }
      line.clear();
    };
    while (more) {
      const std::size_t n = std::fread(buf, 1, sizeof buf, stdin);
      more = n == sizeof buf;
      for (std::size_t i = 0; i < n; ++i) {
        if (buf[i] == '\n') {
          emit();
        } else {
          line.push_back(buf[i]);
        }
      }
    }
    if (std::ferror(stdin)) throw RuntimeError("reading stdin failed");
    if (!line.empty()) emit();
    if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) {
      throw RuntimeError("writing the ids to stdout failed");
    }
  });
}

}  // namespace cputrain::cli
