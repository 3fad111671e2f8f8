// Fuzz target: the Hugging Face tokenizer.json reader (data::HfTokenizer, src/data/hf_tokenizer.h),
// on the input as the file. A file it accepts must give a tokenizer whose ids, for a few texts
// of several scripts, special-token spellings and bytes that are not UTF-8, are all in
// [0, vocab_size()), with and without special tokens, and whose Decode of them returns (a
// pipeline may drop text, so it need not give the text back).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "data/hf_tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  cputrain::fuzz::MemFile file(data, size);
  std::unique_ptr<cputrain::data::HfTokenizer> tok;
  try {
    tok = cputrain::data::HfTokenizer::Load(file.path());
  } catch (const cputrain::InputError&) {
    return 0;
  }
  if (tok->vocab_size() <= 0) std::abort();
  static const std::string kTexts[] = {
      "Hello world, it's 2024! ", "  caf\xc3\xa9 e\xcc\x81 \xe4\xbd\xa0\xe5\xa5\xbd\t\r\n",
      "<s>x</s><|endoftext|><unk>", "\xff\xfe \xc3", "\xe2\x96\x81\xe2\x96\x81 12345"};
  for (const std::string& text : kTexts) {
    for (bool special : {false, true}) {
      std::vector<int> ids;
      if (special) {
        tok->EncodeWithSpecial(text, &ids);
      } else {
        tok->Encode(text, &ids);
      }
      for (int id : ids) {
        if (id < 0 || id >= tok->vocab_size()) std::abort();
      }
      try {
        tok->Decode(ids.data(), ids.size());
      } catch (const cputrain::InputError&) {
        std::abort();  // ids Encode made are in the vocabulary
      }
    }
  }
  return 0;
}
