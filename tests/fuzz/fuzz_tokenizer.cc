// Fuzz target: the tokenizers (src/data/tokenizer.h), on arbitrary bytes (valid UTF-8 or not).
//
// Checks the properties the rest of the project relies on, aborting when one fails:
//   - both tokenizers are lossless: Decode(Encode(x)) == x, with every id in [0, V);
//   - the gpt2 pre-tokenizer's pieces are non-empty and concatenate to the text;
//   - the two BPE loops (scan and heap, gpt2_tokenizer.h) give the same ids for a piece short
//     enough for the scan loop;
//   - prepare-data's chunk cuts: wherever IsGpt2SafeCut(x, pos) holds, encoding x[0, pos) and
//     x[pos, end) separately gives the ids of x;
//   - Decode of arbitrary ids (each 2 input bytes minus 1000) returns bytes or throws InputError.
// The gpt2 vocabulary is the one MakeTokenizer finds (scripts/install-deps.sh installs it).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "data/gpt2_pretokenizer.h"
#include "data/gpt2_tokenizer.h"
#include "data/tokenizer.h"

namespace {

using cputrain::data::Tokenizer;

[[noreturn]] void Fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "tokenizer property broken: %s (input of %zu bytes)\n", what, text.size());
  std::abort();
}

const Tokenizer& Load(const char* name) {
  try {
    static std::unique_ptr<Tokenizer> gpt2 = cputrain::data::MakeTokenizer("gpt2");
    static std::unique_ptr<Tokenizer> bytes = cputrain::data::MakeTokenizer("bytes");
    return std::string_view(name) == "gpt2" ? *gpt2 : *bytes;
  } catch (const cputrain::Error& e) {
    std::fprintf(stderr, "cannot load the %s tokenizer: %s (%s)\n", name, e.what(),
                 e.hint().c_str());
    std::abort();  // the harness cannot run, not a finding about the input
  }
}

std::vector<int> Encode(const Tokenizer& t, std::string_view text) {
  std::vector<int> ids;
  t.Encode(text, &ids);
  return ids;
}

void CheckLossless(const Tokenizer& t, std::string_view text, const std::vector<int>& ids) {
  for (int id : ids) {
    if (id < 0 || id >= t.vocab_size()) Fail("an id outside [0, V)", text);
  }
  if (t.Decode(ids.data(), ids.size()) != text) Fail("Decode(Encode(x)) != x", text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const Tokenizer& bytes = Load("bytes");
  const auto& gpt2 = static_cast<const cputrain::data::Gpt2Tokenizer&>(Load("gpt2"));

  CheckLossless(bytes, text, Encode(bytes, text));
  const std::vector<int> ids = Encode(gpt2, text);
  CheckLossless(gpt2, text, ids);

  std::string joined;
  cputrain::data::Gpt2PreTokenizer pre(text);
  std::string_view piece;
  while (pre.Next(&piece)) {
    if (piece.empty()) Fail("an empty piece", text);
    joined += piece;
    if (piece.size() > cputrain::data::Gpt2Tokenizer::kScanMaxBytes) continue;  // scan refuses
    std::vector<int> scan, heap;
    gpt2.Bpe(piece, &scan, cputrain::data::Gpt2Tokenizer::BpeLoop::kScan);
    gpt2.Bpe(piece, &heap, cputrain::data::Gpt2Tokenizer::BpeLoop::kHeap);
    if (scan != heap) Fail("the scan and heap BPE loops disagree", text);
  }
  if (joined != text) Fail("the pieces do not concatenate to the text", text);

  int cuts = 0;
  for (std::size_t pos = 1; pos < text.size() && cuts < 4; ++pos) {
    if (!cputrain::data::IsGpt2SafeCut(text, pos)) continue;
    ++cuts;
    std::vector<int> split = Encode(gpt2, text.substr(0, pos));
    gpt2.Encode(text.substr(pos), &split);
    if (split != ids) Fail("encoding at a safe cut differs from encoding whole", text);
  }

  std::vector<int> any;
  for (std::size_t i = 0; i + 1 < size; i += 2) any.push_back((data[i] | data[i + 1] << 8) - 1000);
  for (const Tokenizer* t : {&bytes, static_cast<const Tokenizer*>(&gpt2)}) {
    try {
      (void)t->Decode(any.data(), any.size());
    } catch (const cputrain::InputError&) {
    }
  }
  return 0;
}
