// SQuAD question answering examples, read from the files Hugging Face's run_qa.py is given
// (docs/question-answering.md, "Data: SQuAD files, features and metrics"):
//   - the official SQuAD v1.1 / v2.0 JSON: {"data": [{"title", "paragraphs": [{"context",
//     "qas": [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]};
//   - the Hugging Face datasets layout: records {"id", "title", "context", "question",
//     "answers": {"text": [...], "answer_start": [...]}} as JSON Lines, a JSON list, or a JSON
//     object {"data": [records]}.
// The layout is detected from the content, not the file name.
//
// Bad input is an InputError (exit 2) naming the file, the record (its place and id), the
// problem and the fix: not JSON, a missing or mistyped key, an answer_start outside the context,
// an empty answer text, an impossible question with answers, a duplicate id. An answer whose
// text differs from the context at answer_start is not an error (run_qa.py trusts answer_start
// and the text's length, and so do we): ReadSquad counts them and logs a warning with the first
// ids, because in a file of one's own it usually means answer_start counts bytes, not characters.
//
// Thread safety: ReadSquad may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cputrain::task {

struct Example {
  std::string id, title, question, context;
  std::vector<std::string> answer_texts;
  // Where each answer starts in the context, in characters (Unicode code points, Python's str
  // indices), as in the file. Empty for an unanswerable (SQuAD v2.0) question.
  std::vector<int> answer_starts;
};

struct SquadData {
  std::string path;
  std::string layout;  // "squad-json", "hf-json" or "hf-jsonl"
  std::vector<Example> examples;
  std::int64_t unanswerable = 0;       // examples without answers
  std::int64_t answer_mismatches = 0;  // answers whose text is not the context at answer_start
};

// Reads one file (at most 1 GiB). Throws InputError as described above.
SquadData ReadSquad(const std::string& path);

// The byte offset into `context` of answer `k`'s first character, and one past its last (the
// answer's text length added to answer_start in characters, as run_qa.py does).
struct ByteSpan {
  std::size_t begin, end;
};
ByteSpan AnswerBytes(const Example& example, std::size_t k);

}  // namespace cputrain::task
