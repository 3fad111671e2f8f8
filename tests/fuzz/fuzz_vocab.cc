// Fuzz target: a BERT vocab.txt (data::WordPieceTokenizer, src/data/wordpiece.h), on the input
// as the file. A file it accepts is UTF-8 (issue 32: a line that was not was accepted) and must
// give, for a few texts of several scripts and bytes that are not UTF-8, ids in [0, V) with one
// offset each, inside the text and in order; Decode of them returns.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/utf8.h"
#include "data/wordpiece.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace cputrain;
  fuzz::MemFile file(data, size);
  std::unique_ptr<data::WordPieceTokenizer> tok;
  try {
    tok = data::WordPieceTokenizer::Load(file.path());
  } catch (const InputError&) {
    return 0;
  }
  if (FindUtf8Error(std::string_view(reinterpret_cast<const char*>(data), size))) std::abort();
  static const std::string kTexts[] = {"Hello world, it's 2024! [CLS] [SEP]",
                                       "  caf\xc3\xa9 e\xcc\x81 \xe4\xbd\xa0\xe5\xa5\xbd\t\r\n",
                                       "unaffable ##ing [UNK] [MASK]", "\xff\xfe \xc3",
                                       "\xc3\x89"
                                       "COLE na\xc3\xaf"
                                       "ve \xf0\x9f\x98\x80"};
  for (const std::string& text : kTexts) {
    std::vector<int> ids;
    std::vector<data::Offset> offsets;
    tok->EncodeWithOffsets(text, &ids, &offsets);
    if (ids.size() != offsets.size()) std::abort();
    uint32_t last = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= tok->vocab_size()) std::abort();
      const data::Offset o = offsets[i];
      if (o.begin > o.end || o.end > text.size() || o.begin < last) std::abort();
      last = o.begin;
    }
    try {
      tok->Decode(ids.data(), ids.size());
    } catch (const InputError&) {
      std::abort();  // ids Encode made are in the vocabulary
    }
  }
  return 0;
}
