// TRL 0.22.2's SFT data preparation (sft_data.h): the rows read, their form checked, tokenized as
// SFTTrainer._prepare_dataset's tokenize() does, the labels as DataCollatorForLanguageModeling
// masks them, truncated as truncate_dataset.
#include "task/sft/sft_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <string_view>

#include "common/error.h"
#include "common/files.h"

namespace cputrain::task {
namespace {

using chat::Json;

constexpr const char* kFormsHint =
    "each row needs \"messages\" (a list of {\"role\", \"content\"}), \"prompt\" and "
    "\"completion\" (two strings, or two such lists), or \"text\" (a string), as TRL's SFT "
    "datasets";

Json ParseRow(std::string_view text, const std::string& where) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    throw InputError(fmt::format("{} is not valid JSON", where),
                     "write one JSON object a line (JSON Lines), or a JSON array of objects");
  }
  if (!j.is_object()) {
    throw InputError(fmt::format("{} is not a JSON object", where), kFormsHint);
  }
  return j;
}

// A message list: a non-empty array of objects, each with a string "role" and a "content".
bool IsMessages(const Json& v) {
  return v.is_array() && !v.empty() && v[0].is_object() && v[0].contains("role");
}

void CheckMessages(const Json& v, const char* key, const std::string& where) {
  if (!v.is_array() || v.empty()) {
    throw InputError(fmt::format("{}: \"{}\" is not a non-empty list of messages", where, key),
                     kFormsHint);
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    const Json& m = v[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content")) {
      throw InputError(
          fmt::format("{}: message {} of \"{}\" has no string \"role\" and \"content\"", where, i,
                      key),
          "write each message as {\"role\": \"user\" | \"assistant\" | \"system\" | ..., "
          "\"content\": \"...\"}");
    }
  }
}

void CheckString(const Json& row, const char* key, const std::string& where) {
  if (!row.contains(key) || !row[key].is_string()) {
    throw InputError(fmt::format("{}: \"{}\" is missing or not a string", where, key), kFormsHint);
  }
}

// apply_chat_template(messages, tools=row's tools, **row's chat_template_kwargs) as TRL's
// tokenize() calls it (MakeChatCall refuses the kwargs transformers refuses).
chat::ChatEncoding Apply(const SftTokenizing& tk, const JsonRow& r, Json messages, bool masks) {
  const Json& row = r.value;
  const chat::ChatCall call = chat::MakeChatCall(
      tk.special, std::move(messages), row.contains("tools") ? row["tools"] : Json(nullptr),
      row.contains("chat_template_kwargs") ? row["chat_template_kwargs"] : Json(nullptr), false,
      r.where);
  return chat::ApplyChatTemplate(*tk.chat, *tk.tokenizer, call.variables, masks, r.where,
                                 call.chat_template ? &*call.chat_template : nullptr);
}

std::vector<int> Encode(const SftTokenizing& tk, const std::string& text) {
  std::vector<int> ids;
  tk.tokenizer->EncodeWithSpecial(text, &ids);  // tokenizer(text): add_special_tokens=True
  return ids;
}

std::string WithEos(const SftTokenizing& tk, std::string s) {
  if (!tk.eos_text.empty() &&
      (s.size() < tk.eos_text.size() ||
       s.compare(s.size() - tk.eos_text.size(), tk.eos_text.size(), tk.eos_text) != 0)) {
    s += tk.eos_text;
  }
  return s;
}

struct Tokenized {
  std::vector<int> ids;
  std::vector<uint8_t> label;
};

// The completion mask of prompt-completion rows: 0 for the prompt's tokens, 1 after.
std::vector<uint8_t> CompletionMask(std::size_t prompt, std::size_t all) {
  std::vector<uint8_t> m(all, 1);
  std::fill(m.begin(), m.begin() + static_cast<std::ptrdiff_t>(std::min(prompt, all)), 0);
  return m;
}

Tokenized TokenizeRow(const JsonRow& r, SftForm form, const SftTokenizing& tk,
                      const SftOptions& o) {
  const Json& row = r.value;
  Tokenized t;
  switch (form) {
    case SftForm::kMessages: {
      chat::ChatEncoding e = Apply(tk, r, row["messages"], o.assistant_only_loss);
      if (o.assistant_only_loss && std::find(e.assistant_masks.begin(), e.assistant_masks.end(),
                                             1) == e.assistant_masks.end()) {
        throw InputError(
            fmt::format("{}: --assistant_only_loss, but the row has no assistant tokens", r.where),
            "give every conversation an assistant message (TRL refuses such a row too)");
      }
      t.ids = std::move(e.ids);
      t.label = o.assistant_only_loss ? std::move(e.assistant_masks)
                                      : std::vector<uint8_t>(t.ids.size(), 1);
      break;
    }
    case SftForm::kText:
      t.ids = Encode(tk, WithEos(tk, row["text"].get<std::string>()));
      t.label.assign(t.ids.size(), 1);
      break;
    case SftForm::kPromptCompletion: {
      const std::string prompt = row["prompt"].get<std::string>();
      const std::size_t p = Encode(tk, prompt).size();
      t.ids = Encode(tk, prompt + WithEos(tk, row["completion"].get<std::string>()));
      t.label = o.completion_only_loss ? CompletionMask(p, t.ids.size())
                                       : std::vector<uint8_t>(t.ids.size(), 1);
      break;
    }
    case SftForm::kConversationalPromptCompletion: {
      const std::size_t p = Apply(tk, r, row["prompt"], false).ids.size();
      Json all = row["prompt"];
      for (const Json& m : row["completion"]) all.push_back(m);
      chat::ChatEncoding e = Apply(tk, r, std::move(all), o.assistant_only_loss);
      t.ids = std::move(e.ids);
      t.label = o.completion_only_loss ? CompletionMask(p, t.ids.size())
                                       : std::vector<uint8_t>(t.ids.size(), 1);
      if (o.assistant_only_loss) {
        for (std::size_t k = 0; k < t.label.size(); ++k) t.label[k] &= e.assistant_masks[k];
      }
      break;
    }
  }
  return t;
}

}  // namespace

const char* SftFormName(SftForm f) {
  switch (f) {
    case SftForm::kMessages:
      return "conversational (messages)";
    case SftForm::kText:
      return "language modeling (text)";
    case SftForm::kPromptCompletion:
      return "prompt-completion";
    case SftForm::kConversationalPromptCompletion:
      return "conversational prompt-completion";
  }
  return "";
}

SftForm FormOf(const Json& row, const std::string& where) {
  if (row.contains("prompt")) {
    if (!row.contains("completion")) {
      throw InputError(fmt::format("{}: \"prompt\" without \"completion\"", where), kFormsHint);
    }
    if (IsMessages(row["prompt"])) {
      CheckMessages(row["prompt"], "prompt", where);
      CheckMessages(row["completion"], "completion", where);
      return SftForm::kConversationalPromptCompletion;
    }
    CheckString(row, "prompt", where);
    CheckString(row, "completion", where);
    return SftForm::kPromptCompletion;
  }
  if (row.contains("messages")) {
    CheckMessages(row["messages"], "messages", where);
    return SftForm::kMessages;
  }
  if (row.contains("text")) {
    CheckString(row, "text", where);
    return SftForm::kText;
  }
  throw InputError(
      fmt::format("{} has none of \"messages\", \"prompt\"/\"completion\", \"text\"", where),
      kFormsHint);
}

std::vector<JsonRow> ReadJsonRows(const std::string& path, const std::string& flag, int limit) {
  const std::string text = ReadFile(
      path, InputKind{"dataset", "a JSON Lines or JSON file", kMaxJsonBytes, "check " + flag});
  std::vector<JsonRow> rows;
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  const auto full = [&] { return limit > 0 && rows.size() >= static_cast<std::size_t>(limit); };
  if (first != std::string::npos && text[first] == '[') {
    const Json all = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (all.is_discarded()) {
      throw InputError(fmt::format("{} is not valid JSON", path),
                       "write a JSON array of objects, or JSON Lines (one object a line)");
    }
    for (std::size_t i = 0; i < all.size() && !full(); ++i) {
      const std::string where = fmt::format("{}, row {}", path, i + 1);
      if (!all[i].is_object()) throw InputError(where + " is not a JSON object", kFormsHint);
      rows.push_back({all[i], where});
    }
  } else {
    std::size_t at = 0;
    for (int line = 1; at < text.size() && !full(); ++line) {
      std::size_t end = text.find('\n', at);
      if (end == std::string::npos) end = text.size();
      const std::string_view l(text.data() + at, end - at);
      if (l.find_first_not_of(" \t\r") != std::string_view::npos) {
        const std::string where = fmt::format("{}:{}", path, line);
        rows.push_back({ParseRow(l, where), where});
      }
      at = end + 1;
    }
  }
  if (rows.empty()) {
    throw InputError(fmt::format("{} '{}' has no rows", flag, path),
                     "pass a JSON Lines or JSON file of SFT rows");
  }
  return rows;
}

SftRows TokenizeSft(const std::vector<JsonRow>& rows, const std::string& path,
                    const std::string& flag, const SftTokenizing& tk, const SftOptions& o) {
  SftRows out;
  out.path = path;
  out.form = FormOf(rows.at(0).value, rows[0].where);
  const bool conversational =
      out.form == SftForm::kMessages || out.form == SftForm::kConversationalPromptCompletion;
  if (conversational && tk.chat == nullptr) {
    throw InputError(
        fmt::format("{} '{}' is conversational, but {}", flag, path, tk.template_problem),
        "use a tokenizer with a chat template (chat_template.jinja, or "
        "tokenizer_config.json's chat_template), or plain text rows");
  }
  if (o.assistant_only_loss && !conversational) {
    throw InputError(fmt::format("--assistant_only_loss, but {} '{}' is {}, not conversational",
                                 flag, path, SftFormName(out.form)),
                     "drop --assistant_only_loss (TRL supports it for conversational data only)");
  }
  for (const JsonRow& r : rows) {
    const SftForm f = FormOf(r.value, r.where);
    if (f != out.form) {
      throw InputError(fmt::format("{} is {}, but the file's first row is {}", r.where,
                                   SftFormName(f), SftFormName(out.form)),
                       "give every row of a dataset the same form");
    }
    Tokenized t = TokenizeRow(r, f, tk, o);
    const std::size_t n = std::min(t.ids.size(), static_cast<std::size_t>(o.max_length));
    if (n == 0) {
      throw InputError(fmt::format("{} has no tokens", r.where), "drop the empty row");
    }
    const auto label = std::find(t.label.begin() + 1, t.label.end(), uint8_t{1});  // n >= 1
    out.first_target.push_back(label == t.label.end()
                                   ? std::string::npos
                                   : static_cast<std::size_t>(label - t.label.begin()));
    out.where.push_back(r.where);
    out.ids.insert(out.ids.end(), t.ids.begin(), t.ids.begin() + static_cast<std::ptrdiff_t>(n));
    out.label.insert(out.label.end(), t.label.begin(),
                     t.label.begin() + static_cast<std::ptrdiff_t>(n));
    out.begin.push_back(out.ids.size());
  }
  return out;
}

SftUntrained CheckSftTargets(const SftRows& r, const std::vector<std::vector<std::size_t>>& bins,
                             const std::string& flag, int max_length) {
  SftUntrained u;
  std::size_t first = r.rows();
  for (const std::vector<std::size_t>& bin : bins) {
    for (std::size_t d = 0; d < bin.size(); ++d) {
      const std::size_t i = bin[d];
      // After another document, the row's first token is the target of that one's last.
      const auto begin = r.label.begin() + static_cast<std::ptrdiff_t>(r.begin[i]);
      const auto end = r.label.begin() + static_cast<std::ptrdiff_t>(r.begin[i + 1]);
      if (std::find(d == 0 && begin != end ? begin + 1 : begin, end, uint8_t{1}) != end) continue;
      u.rows += 1;
      first = std::min(first, i);
    }
  }
  if (u.rows > 0) u.first = r.where.at(first);
  if (u.rows < r.rows()) return u;
  const std::size_t earliest = static_cast<std::size_t>(
      std::min_element(r.first_target.begin(), r.first_target.end()) - r.first_target.begin());
  const std::size_t reach = r.first_target.at(earliest);
  throw InputError(
      fmt::format("{} '{}': no row has a label within --max_length {} (every answer starts at or "
                  "past token {}, or there is none), so there is nothing to compute a loss on",
                  flag, r.path, max_length, max_length),
      reach == std::string::npos
          ? std::string("give the rows an answer to train on (a completion, an assistant reply)")
          : fmt::format("raise --max_length to at least {} (the earliest answer, {}'s, starts at "
                        "token {}), or shorten the prompts",
                        reach + 1, r.where.at(earliest), reach + 1));
}

std::vector<std::vector<std::size_t>> PackBfd(const SftRows& rows, int max_length,
                                              std::size_t chunk) {
  std::vector<std::vector<std::size_t>> bins;
  for (std::size_t c0 = 0; c0 < rows.rows(); c0 += chunk) {
    const std::size_t c1 = std::min(rows.rows(), c0 + chunk);
    std::vector<std::size_t> order(c1 - c0);
    for (std::size_t i = c0; i < c1; ++i) order[i - c0] = i;
    const auto len = [&](std::size_t i) { return rows.begin[i + 1] - rows.begin[i]; };
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return len(a) > len(b); });
    // room -> the bins with that much room left, first come first served (TRL's space_to_bin
    // deques; its segment tree finds the smallest room >= a length, as lower_bound does here).
    std::map<std::size_t, std::deque<std::size_t>> room;
    const std::size_t cap = static_cast<std::size_t>(max_length);
    for (std::size_t i : order) {
      const std::size_t n = len(i);
      auto it = room.lower_bound(n);
      std::size_t bin, left;
      if (it != room.end() && it->first < cap) {
        bin = it->second.front();
        left = it->first;
        it->second.pop_front();
        if (it->second.empty()) room.erase(it);
      } else {
        bin = bins.size();
        bins.emplace_back();
        left = cap;
      }
      bins[bin].push_back(i);
      if (left - n > 0) room[left - n].push_back(bin);
    }
  }
  return bins;
}

}  // namespace cputrain::task
