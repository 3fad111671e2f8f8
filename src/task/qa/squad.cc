// ReadSquad: the two SQuAD layouts into Examples, every record checked (squad.h).
#include "task/qa/squad.h"

#include <fmt/format.h>

#include <climits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "common/utf8.h"
#include "text/python_text.h"

namespace cputrain::task {
namespace {

using json = nlohmann::json;

constexpr InputKind kSquadFile{"SQuAD data file",
                               "a SQuAD v1.1/v2.0 JSON file or Hugging Face datasets records "
                               "(JSON Lines or a JSON list)",
                               1ull << 30, "check --data"};

constexpr const char* kLayoutHint =
    "give the official SQuAD JSON ({\"data\": [{\"title\", \"paragraphs\": [{\"context\", "
    "\"qas\": [{\"id\", \"question\", \"answers\": [{\"text\", \"answer_start\"}]}]}]}]}) or "
    "Hugging Face records, one JSON object a line: {\"id\", \"title\", \"context\", "
    "\"question\", \"answers\": {\"text\": [...], \"answer_start\": [...]}}";

// Reads records into `out`, checking each; `where` names a record in messages.
class Reader {
 public:
  explicit Reader(std::string path) { data_.path = std::move(path); }

  [[noreturn]] void Fail(const std::string& where, const std::string& problem,
                         const std::string& fix) const {
    throw InputError(fmt::format("{}: {}: {}", data_.path, where, problem), fix);
  }

  const json& Key(const json& obj, const char* key, const std::string& where) const {
    if (!obj.is_object())
      Fail(where, fmt::format("is {}, not an object", obj.type_name()), kLayoutHint);
    auto it = obj.find(key);
    if (it == obj.end()) {
      Fail(where, fmt::format("has no \"{}\"", key),
           fmt::format("add \"{}\" to the record ({})", key, kLayoutHint));
    }
    return *it;
  }

  std::string String(const json& obj, const char* key, const std::string& where,
                     bool optional = false, bool number_ok = false) const {
    if (optional && (!obj.contains(key) || obj[key].is_null())) return "";
    const json& v = Key(obj, key, where);
    if (v.is_string()) return v.get<std::string>();
    // run_qa.py turns ids into str(); integer ids in files of one's own are common.
    if (number_ok && v.is_number_integer()) return v.dump();
    Fail(where, fmt::format("\"{}\" is {}, not a string", key, v.type_name()),
         fmt::format("make \"{}\" a JSON string", key));
  }

  // One answer: its text and answer_start (characters) against the context.
  void AddAnswer(Example* ex, const json& text, const json& start, const std::string& where) {
    if (!text.is_string()) {
      Fail(where, fmt::format("an answer's text is {}, not a string", text.type_name()),
           "make each answer text a JSON string");
    }
    if (!start.is_number_integer()) {
      Fail(where, fmt::format("an answer_start is {}, not an integer", start.type_name()),
           "make each answer_start the answer's first character's index in the context");
    }
    const std::string t = text.get<std::string>();
    if (t.empty()) {
      Fail(where, "an answer's text is empty",
           "remove the empty answer; an unanswerable question has no answers (\"answers\": [] in "
           "SQuAD v2.0, {\"text\": [], \"answer_start\": []} in the Hugging Face layout)");
    }
    const std::size_t chars = CountCodePoints(ex->context);
    const std::size_t len = CountCodePoints(t);
    // As written (start.dump()): a number above INT64_MAX is unsigned in the JSON, and read as
    // int64 it would be reported negative.
    const bool negative =
        start.is_number_integer() && !start.is_number_unsigned() && start.get<std::int64_t>() < 0;
    const std::uint64_t s = negative ? 0 : start.get<std::uint64_t>();
    if (negative || s > chars || s + len > chars) {
      Fail(where,
           fmt::format("answer_start {} with the answer's {} characters ('{}') {} the context "
                       "of {} characters",
                       start.dump(), len, t.substr(0, 60),
                       negative ? "starts before" : "ends outside", chars),
           "answer_start counts characters (Unicode code points, as Python's str), from 0; fix "
           "the answer or its answer_start");
    }
    ex->answer_texts.push_back(t);
    ex->answer_starts.push_back(static_cast<int>(s));
    const ByteSpan b = AnswerBytes(*ex, ex->answer_texts.size() - 1);
    if (std::string_view(ex->context).substr(b.begin, b.end - b.begin) != t) {
      if (data_.answer_mismatches < 3) mismatch_ids_ += fmt::format(" '{}'", ex->id);
      ++data_.answer_mismatches;
    }
  }

  void Add(Example ex, const std::string& where) {
    auto [it, fresh] = where_.emplace(ex.id, where);
    if (!fresh) {
      Fail(where, fmt::format("id '{}' is also the id of {}", ex.id, it->second),
           "give every question its own id (predictions are keyed by id)");
    }
    if (ex.answer_texts.empty()) ++data_.unanswerable;
    data_.examples.push_back(std::move(ex));
  }

  // The official layout: articles, paragraphs, questions.
  void Squad(const json& articles) {
    std::size_t n = 0;
    for (const json& a : articles) {
      const std::string aw = fmt::format("data[{}]", n++);
      const std::string title = String(a, "title", aw, /*optional=*/true);
      const json& paragraphs = Key(a, "paragraphs", aw);
      if (!paragraphs.is_array()) Fail(aw, "\"paragraphs\" is not a list", kLayoutHint);
      for (std::size_t p = 0; p < paragraphs.size(); ++p) {
        const std::string pw = fmt::format("{}.paragraphs[{}]", aw, p);
        const std::string context = String(paragraphs[p], "context", pw);
        const json& qas = Key(paragraphs[p], "qas", pw);
        if (!qas.is_array()) Fail(pw, "\"qas\" is not a list", kLayoutHint);
        for (std::size_t q = 0; q < qas.size(); ++q) {
          std::string w = fmt::format("{}.qas[{}]", pw, q);
          Example ex;
          ex.id = String(qas[q], "id", w, false, /*number_ok=*/true);
          w += fmt::format(" (id '{}')", ex.id);
          ex.title = title;
          ex.context = context;
          ex.question = String(qas[q], "question", w);
          const json& answers = Key(qas[q], "answers", w);
          if (!answers.is_array()) {
            Fail(w, "\"answers\" is not a list",
                 "write \"answers\": [{\"text\", \"answer_start\"}]");
          }
          for (const json& ans : answers) {
            AddAnswer(&ex, Key(ans, "text", w + " answer"), Key(ans, "answer_start", w + " answer"),
                      w);
          }
          const auto imp = qas[q].find("is_impossible");
          if (imp != qas[q].end() && imp->is_boolean() && imp->get<bool>() && !answers.empty()) {
            Fail(w, "is_impossible is true but the question has answers",
                 "empty its \"answers\" (SQuAD v2.0 keeps an impossible question's candidates in "
                 "\"plausible_answers\") or set is_impossible to false");
          }
          Add(std::move(ex), w);
        }
      }
    }
  }

  // One Hugging Face record.
  void Record(const json& r, const std::string& where) {
    if (!r.is_object())
      Fail(where, fmt::format("is {}, not an object", r.type_name()), kLayoutHint);
    Example ex;
    ex.id = String(r, "id", where, false, /*number_ok=*/true);
    const std::string w = fmt::format("{} (id '{}')", where, ex.id);
    ex.title = String(r, "title", w, /*optional=*/true);
    ex.question = String(r, "question", w);
    ex.context = String(r, "context", w);
    const json& answers = Key(r, "answers", w);
    const auto text = answers.is_object() ? answers.find("text") : answers.end();
    const auto start = answers.is_object() ? answers.find("answer_start") : answers.end();
    if (text == answers.end() || start == answers.end() || !text->is_array() ||
        !start->is_array()) {
      Fail(w, "\"answers\" is not {\"text\": [...], \"answer_start\": [...]}",
           "write the answers as two lists of the same length, {\"text\": [\"...\"], "
           "\"answer_start\": [N]}; an unanswerable question has two empty lists");
    }
    if (text->size() != start->size()) {
      Fail(w, fmt::format("answers has {} texts but {} answer_starts", text->size(), start->size()),
           "give one answer_start per answer text");
    }
    for (std::size_t k = 0; k < text->size(); ++k) AddAnswer(&ex, (*text)[k], (*start)[k], w);
    Add(std::move(ex), w);
  }

  SquadData Finish() {
    if (data_.examples.empty()) {
      throw InputError(fmt::format("{}: holds no questions", data_.path), kLayoutHint);
    }
    if (data_.answer_mismatches > 0) {
      log::Warn(
          "{}: {} answer(s) differ from the context at their answer_start (first:{}); features "
          "label the span answer_start + the text's length in characters, as run_qa.py does. "
          "If answer_start counts bytes, convert it to characters",
          data_.path, data_.answer_mismatches, mismatch_ids_);
    }
    return std::move(data_);
  }

  SquadData data_;

 private:
  std::unordered_map<std::string, std::string> where_;
  std::string mismatch_ids_;
};

}  // namespace

ByteSpan AnswerBytes(const Example& example, std::size_t k) {
  const std::string_view c = example.context;
  const std::size_t begin = CharsToBytes(c, static_cast<std::size_t>(example.answer_starts[k]));
  const std::size_t len = CountCodePoints(example.answer_texts[k]);
  // Counted from `begin`: the same as CharsToBytes(c, start + len), without a second walk.
  return {begin, begin + CharsToBytes(c.substr(std::min(begin, c.size())), len)};
}

SquadData ReadSquad(const std::string& path) {
  const std::string text = ReadUtf8File(path, kSquadFile);
  Reader reader(path);
  json doc;
  std::string whole_error;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    whole_error = e.what();
  }
  if (whole_error.empty()) {
    const json* records = &doc;
    // A JSON Lines file of one record is one JSON object.
    if (doc.is_object() && !doc.contains("data") &&
        (doc.contains("context") || doc.contains("question"))) {
      reader.data_.layout = "hf-jsonl";
      reader.Record(doc, "line 1");
      return reader.Finish();
    }
    if (doc.is_object()) {
      const auto data = doc.find("data");
      if (data == doc.end() || !data->is_array()) {
        throw InputError(fmt::format("{}: a JSON object without a \"data\" list", path),
                         kLayoutHint);
      }
      records = &*data;
      if (!data->empty() && (*data)[0].is_object() && (*data)[0].contains("paragraphs")) {
        reader.data_.layout = "squad-json";
        reader.Squad(*data);
        return reader.Finish();
      }
    } else if (!doc.is_array()) {
      throw InputError(fmt::format("{}: JSON {}, not SQuAD data", path, doc.type_name()),
                       kLayoutHint);
    }
    reader.data_.layout = "hf-json";
    for (std::size_t i = 0; i < records->size(); ++i) {
      reader.Record((*records)[i], fmt::format("record {}", i));
    }
    return reader.Finish();
  }
  // Not one JSON value: JSON Lines if its first line is a record, else the JSON error stands.
  std::size_t pos = 0, line_no = 0;
  bool first = true;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    json r = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (first && !r.is_object()) {
      throw InputError(fmt::format("{}: not JSON: {}", path, whole_error), kLayoutHint);
    }
    first = false;
    if (r.is_discarded()) {
      reader.Fail(fmt::format("line {}", line_no), "is not JSON",
                  "JSON Lines hold one complete JSON object a line");
    }
    reader.data_.layout = "hf-jsonl";
    reader.Record(r, fmt::format("line {}", line_no));
  }
  if (first) throw InputError(fmt::format("{}: not JSON: {}", path, whole_error), kLayoutHint);
  return reader.Finish();
}

}  // namespace cputrain::task
