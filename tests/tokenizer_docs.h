// The documents the tokenizer tests compare with reference encoders (tokenizer_test.cc against
// tiktoken, tokenizer_hf_test.cc against Hugging Face's tokenizers): hand-picked edge cases,
// tests/data/tokenizer_corpus.txt whole and line by line, and random strings of tricky
// characters.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cputrain::test {

// Printable form of a document for failure messages.
std::string Escaped(std::string_view s);
// Hand-picked edge cases; each is a document of its own.
std::vector<std::string> EdgeCases();
// Random strings over characters that stress the pre-tokenizers' edges: spaces of every kind
// next to contractions, letters, numbers and other.
std::vector<std::string> RandomDocuments(int count, unsigned seed);
// Every document the reference comparisons cover: EdgeCases(), the corpus whole, its lines,
// RandomDocuments(600, 20240520).
std::vector<std::string> ReferenceDocuments();

}  // namespace cputrain::test
