// task/sft internal: a dataset file's rows made into what TRL 0.22.2's SFTTrainer trains on
// (trl/trainer/sft_trainer.py, _prepare_dataset and DataCollatorForLanguageModeling): token ids,
// and which of them are labels (the rest -100).
//
// The forms (TRL's, decided by the first row as TRL decides them; every row must have it):
//   - language modeling, conversational: {"messages": [{"role", "content"}, ...]} rendered by
//     the chat template (apply_chat_template, tools and chat_template_kwargs as given);
//   - language modeling, plain: {"text": "..."}, the eos token appended unless it ends with it,
//     tokenized with the tokenizer's special tokens (tokenizer(text));
//   - prompt-completion: {"prompt", "completion"}, both strings (the completion gets the eos
//     token) or both message lists (prompt rendered alone, then prompt + completion); the
//     completion mask marks the tokens after the prompt's.
// Labels: every token, less those outside the completion (completion_only_loss) and outside the
// template's {% generation %} blocks (assistant_only_loss); then the first max_length tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "data/tokenizer.h"

namespace cputrain::task {

enum class SftForm { kMessages, kText, kPromptCompletion, kConversationalPromptCompletion };
const char* SftFormName(SftForm f);

struct SftOptions {
  // TRL's default None is "on for prompt-completion data": the only data with a completion mask.
  bool completion_only_loss = true;
  bool assistant_only_loss = false;
  int max_length = 1024;
};

// What the rows are tokenized with: the tokenizer, the chat template (null if the tokenizer
// directory has none: then only plain text and string prompt-completion rows are accepted), the
// template's variables (the special tokens) and the eos token's text.
struct SftTokenizing {
  const data::Tokenizer* tokenizer = nullptr;
  const chat::ChatTemplate* chat = nullptr;
  chat::Json special;
  std::string eos_text;
  std::string template_problem;  // why there is no template ("" if there is one)
};

// The rows of one file, tokenized: ids flat, row i's [begin[i], begin[i+1]); label[k] = 1 where
// id k is a label.
struct SftRows {
  std::string path;
  SftForm form = SftForm::kText;
  std::vector<int32_t> ids;
  std::vector<uint8_t> label;
  std::vector<std::size_t> begin = {0};
  std::vector<std::string> where;  // row i's place ("data.jsonl:12"), for messages
  // Row i's first label past its first token, counted before truncation (the model predicts
  // token t from those before it, so a label at 0 is no target of its own row); npos if none.
  std::vector<std::size_t> first_target;
  std::size_t rows() const { return begin.size() - 1; }
};

// The JSON rows of `path` (the first `limit` if limit > 0): JSON Lines (one object a line, blank
// lines skipped) or a JSON array of objects; each named for messages by its place ("data.jsonl:12",
// "data.json, row 3"). InputError naming the place.
struct JsonRow {
  chat::Json value;
  std::string where;
};
std::vector<JsonRow> ReadJsonRows(const std::string& path, const std::string& flag, int limit);

// TRL's tokenization of every row (see above). InputError naming path:line and the fix for a
// row of another form, a missing or mistyped key, a template that raises, or (assistant_only_loss)
// a row with no assistant tokens.
SftRows TokenizeSft(const std::vector<JsonRow>& rows, const std::string& path,
                    const std::string& flag, const SftTokenizing& tk, const SftOptions& o);

// The rows that give the loss no target once cut to max_length (an answer that starts past it, a
// prompt that fills it), given how they are batched: `bins` lists each row's batch row (PackBfd's
// bins with --packing, else one row a bin). A row's first token is a target only where packing
// puts it after another document. TRL keeps such rows, which then add nothing to a step's loss
// or to its count of labels; so do we, and the caller warns. InputError naming `flag`, the file
// and the --max_length that would reach a label when no row at all has a target: a run that
// trains or evaluates nothing would report a loss of 0 (TRL's would be 0/0, NaN).
struct SftUntrained {
  std::size_t rows = 0;  // rows with no target
  std::string first;     // the first one's place
};
SftUntrained CheckSftTargets(const SftRows& r, const std::vector<std::vector<std::size_t>>& bins,
                             const std::string& flag, int max_length);

// TRL's best-fit-decreasing packing (trl/data_utils.py, _pack_bfd; pack_dataset maps it over
// datasets' batches of 1000 rows): within each batch of `chunk` rows, the rows (already at most
// max_length long) by length, longest first (ties in file order), each into the open bin with the
// least room that still fits it (of equal rooms, the one that got that room first), else into a
// new bin; bins in the order they were opened, each listing its rows in the order they went in.
std::vector<std::vector<std::size_t>> PackBfd(const SftRows& rows, int max_length,
                                              std::size_t chunk = 1000);

// The row's form, as TRL's is_conversational and the keys decide it; InputError if none.
SftForm FormOf(const chat::Json& row, const std::string& where);

}  // namespace cputrain::task
