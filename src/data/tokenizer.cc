#include "data/tokenizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "data/gpt2_tokenizer.h"
#include "data/hf_tokenizer.h"
#include "data/wordpiece.h"

namespace cputrain::data {
namespace {

class BytesTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "bytes"; }
  int vocab_size() const override { return 256; }
  int eot_token() const override { return -1; }
  void Encode(std::string_view text, std::vector<int>* out) const override {
    for (char c : text) out->push_back(static_cast<unsigned char>(c));
  }
  bool IsSafeCut(std::string_view, std::size_t) const override { return true; }
  bool reads_utf8() const override { return false; }
  std::string Decode(const int* ids, std::size_t n) const override {
    std::string text(n, '\0');
    for (std::size_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || ids[i] > 255) {
        throw InputError(
            fmt::format("token id {} (position {}) is not in the bytes vocabulary "
                        "[0, 256)",
                        ids[i], i));
      }
      text[i] = static_cast<char>(ids[i]);
    }
    return text;
  }
};

std::string ExecutableDir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

bool HasVocab(const std::filesystem::path& dir) {
  return std::filesystem::is_regular_file(dir / "encoder.json") &&
         std::filesystem::is_regular_file(dir / "vocab.bpe");
}

std::unique_ptr<Tokenizer> MakeGpt2() {
  // An explicit directory is the only one looked at: falling back would hide a typo.
  if (const char* env = std::getenv("CPUTRAIN_GPT2_VOCAB_DIR"); env != nullptr && *env != '\0') {
    return Gpt2Tokenizer::Load(env);
  }
  // The installed copy first (cmake --install, the .deb: <prefix>/bin/../share/...), so that an
  // installed binary never depends on the source tree it was built from; then the source
  // tree's, for a binary run from its build tree.
  std::vector<std::string> places;
  if (std::string exe = ExecutableDir(); !exe.empty()) {
    places.push_back((std::filesystem::path(exe) / ".." / "share" / "cputrain-numa" / "gpt2")
                         .lexically_normal()
                         .string());
  }
#ifdef CPUTRAIN_GPT2_VOCAB_BUILTIN_DIR
  places.push_back(CPUTRAIN_GPT2_VOCAB_BUILTIN_DIR);
#endif
  for (const std::string& dir : places) {
    if (HasVocab(dir)) return Gpt2Tokenizer::Load(dir);
  }
  throw InputError(
      fmt::format("the GPT-2 vocabulary (encoder.json, vocab.bpe) is in none of: {}; "
                  "CPUTRAIN_GPT2_VOCAB_DIR is not set",
                  fmt::join(places, ", ")),
      "run scripts/install-deps.sh --gpt2-vocab (it makes them from PyPI's openai-whisper), or "
      "install cputrain-numa (cmake --install, or the .deb), or set "
      "CPUTRAIN_GPT2_VOCAB_DIR to a directory holding encoder.json and vocab.bpe");
}

// True if the tokenizer.json at `path` has a WordPiece model. Only a file that holds the word is
// parsed here (a BPE tokenizer.json is parsed once, by HfTokenizer).
bool IsWordPieceJson(const std::string& path) {
  std::string text;
  try {
    text = ReadFile(path);
  } catch (const InputError&) {
    return false;  // HfTokenizer::Load reports it
  }
  if (text.find("\"WordPiece\"") == std::string::npos) return false;
  const nlohmann::json root = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object() || !root.contains("model") || !root["model"].is_object()) return false;
  const auto type = root["model"].find("type");
  return type != root["model"].end() && *type == "WordPiece";
}

}  // namespace

const SpecialFrame& Tokenizer::special_frame() const {
  static const SpecialFrame kNone;
  return kNone;
}

void Tokenizer::EncodeWithSpecial(std::string_view text, std::vector<int>* out) const {
  const SpecialFrame& frame = special_frame();
  out->insert(out->end(), frame.before.begin(), frame.before.end());
  Encode(text, out);
  out->insert(out->end(), frame.after.begin(), frame.after.end());
}

void Tokenizer::EncodeWithOffsets(std::string_view, std::vector<int>*, std::vector<Offset>*) const {
  throw InputError(fmt::format("the tokenizer {} has no offsets", name()),
                   "use a WordPiece (BERT) tokenizer: a vocab.txt or its tokenizer.json");
}

int Tokenizer::TokenId(std::string_view) const { return -1; }

std::unique_ptr<Tokenizer> MakeTokenizer(const std::string& name) {
  if (name == "gpt2") return MakeGpt2();
  if (name == "bytes") return std::make_unique<BytesTokenizer>();
  std::error_code ec;
  const std::filesystem::path path(name);
  if (std::filesystem::is_directory(path, ec)) {
    auto has = [&](const char* file) { return std::filesystem::exists(path / file, ec); };
    if (has("tokenizer.json")) {
      if (IsWordPieceJson((path / "tokenizer.json").string()))
        return WordPieceTokenizer::Load(name);
      return HfTokenizer::Load(name);
    }
    if (has("vocab.txt")) return WordPieceTokenizer::Load(name);
    if (has("encoder.json") || has("vocab.json") || has("vocab.bpe") || has("merges.txt")) {
      return Gpt2Tokenizer::Load(name);  // names the missing one of a pair
    }
    throw InputError(
        fmt::format("directory '{}' holds no tokenizer: no tokenizer.json, nor BERT's vocab.txt, "
                    "nor GPT-2's vocab.json + merges.txt or encoder.json + vocab.bpe",
                    name),
        "pass the directory a Hugging Face model came in (it holds tokenizer.json), the "
        "tokenizer.json itself, a vocab.txt, gpt2 or bytes");
  }
  if (path.extension() == ".txt" && std::filesystem::is_regular_file(path, ec)) {
    return WordPieceTokenizer::Load(name);
  }
  if (path.filename() == "tokenizer.json" || std::filesystem::is_regular_file(path, ec)) {
    if (IsWordPieceJson(name)) return WordPieceTokenizer::Load(name);
    return HfTokenizer::Load(name);
  }
  throw InputError(fmt::format("unknown tokenizer '{}'", name),
                   "use gpt2, bytes, a tokenizer.json (or a directory holding one), a BERT "
                   "vocab.txt, or a directory holding GPT-2's vocab.json + merges.txt");
}

}  // namespace cputrain::data
