// The documents the tokenizer tests compare with reference encoders (tokenizer_test.cc against
// tiktoken, tokenizer_hf_test.cc against Hugging Face's tokenizers): hand-picked edge cases,
// tests/data/tokenizer_corpus.txt whole and line by line, and random strings of tricky
// characters.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/subprocess.h"

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

// Runs a reference maker of tests/data in the peers' Python environment (`python`):
// `python script args... DIR/docs.json DIR/out.json`, `docs` written to the first as a JSON array.
// Returns out.json parsed, printing its "versions" as a note; null (after ADD_FAILURE saying
// why) if the environment is missing or the script fails.
nlohmann::json RunReferenceMaker(const std::string& python, const std::string& script,
                                 const std::vector<std::string>& args, const std::string& dir,
                                 const std::vector<std::string>& docs);

// A reference maker's directory and output, made once per build tree and environment.
struct MadeReference {
  std::string dir;     // the files the maker wrote; read-only for the tests
  nlohmann::json out;  // its out.json; null (after ADD_FAILURE) if it could not run
};
// RunReferenceMaker(python, script, {DIR, args...}, DIR, docs) with DIR under
// CPUTRAIN_BINARY_DIR/tests/reference-cache, keyed by the script's directory's *.py, the args,
// the documents and the Python environment: ctest starts one process per test case, and the
// makers take 10-25 s each, so the first process to finish publishes (a private directory
// renamed into place) and the rest, later or concurrent, read what it made.
MadeReference RunReferenceMakerOnce(const std::string& python, const std::string& script,
                                    const std::vector<std::string>& args,
                                    const std::vector<std::string>& docs);

// `cputrain-numa tokenize ARGS` with `input` on its stdin.
SubprocessResult Tokenize(const std::vector<std::string>& args, const std::string& input);

}  // namespace cputrain::test
