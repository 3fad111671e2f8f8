// Reading the JSON files of Hugging Face tokenizers (tokenizer.json, tokenizer_config.json;
// hf_tokenizer.cc, wordpiece.cc): every fault is an InputError naming the file and the key.
// Internal to src/data.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "common/utf8.h"
#include "data/tokenizer.h"

namespace cputrain::data {

using json = nlohmann::json;

// tokenizer.json (and tokenizer_config.json) can be large: Llama 3's is 9 MB, vocabularies of
// millions of tokens run to hundreds of MB.
constexpr uint64_t kMaxTokenizerJsonBytes = 1ull << 30;

// Reads one JSON file and reports its faults naming the file and the key.
class JsonFile {
 public:
  // `hint`: how to fix a file that is not what it should be (the default of Fail).
  JsonFile(std::string path, std::string hint) : path_(std::move(path)), hint_(std::move(hint)) {}
  const std::string& path() const { return path_; }

  json Parse() const {
    const InputKind kind{"tokenizer file", "a Hugging Face tokenizer.json", kMaxTokenizerJsonBytes,
                         hint_};
    std::string text = ReadUtf8File(path_, kind);
    try {
      return json::parse(text);
    } catch (const json::exception& e) {
      throw InputError(fmt::format("'{}' is not valid JSON: {}", path_, e.what()), hint_);
    }
  }

  [[noreturn]] void Fail(const std::string& key, const std::string& what) const {
    Fail(key, what, hint_);
  }
  [[noreturn]] void Fail(const std::string& key, const std::string& what,
                         const std::string& hint) const {
    throw InputError(fmt::format("'{}': {}: {}", path_, key, what), hint);
  }

  // obj[key], which must exist (null counts as missing unless allow_null).
  const json& At(const json& obj, const std::string& where, const char* key) const {
    if (!obj.is_object()) Fail(where, "is not a JSON object");
    auto it = obj.find(key);
    if (it == obj.end()) Fail(Key(where, key), "is missing");
    return *it;
  }
  std::string Str(const json& obj, const std::string& where, const char* key) const {
    const json& v = At(obj, where, key);
    if (!v.is_string()) Fail(Key(where, key), "is not a string");
    return v.get<std::string>();
  }
  bool Bool(const json& obj, const std::string& where, const char* key, bool def) const {
    if (!obj.is_object()) Fail(where, "is not a JSON object");
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return def;
    if (!it->is_boolean()) Fail(Key(where, key), "is not true or false");
    return it->get<bool>();
  }
  int Int(const json& obj, const std::string& where, const char* key, int def) const {
    if (!obj.is_object()) Fail(where, "is not a JSON object");
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return def;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX) {
      Fail(Key(where, key), "is not a non-negative integer");
    }
    return it->get<int>();
  }
  // An array member (missing or null: empty).
  const json& Array(const json& obj, const std::string& where, const char* key) const {
    static const json kEmpty = json::array();
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return kEmpty;
    if (!it->is_array()) Fail(Key(where, key), "is not an array");
    return *it;
  }
  static std::string Key(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
  }
  // The "type" of a pipeline component.
  std::string Type(const json& obj, const std::string& where) const {
    return Str(obj, where, "type");
  }

 private:
  std::string path_, hint_;
};

// A token named in tokenizer_config.json ("bos_token", "cls_token", ...): a string,
// {"content": ...} or null ("").
inline std::string ConfigToken(const JsonFile& f, const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) return f.Str(*it, key, "content");
  f.Fail(key, "is neither a string nor {\"content\": ...}");
}

// A "Sequence" component (normalizers, pre_tokenizers, processors, decoders): load(item, key)
// for each item of obj[list]; false if obj is another type.
bool LoadSequence(const JsonFile& f, const json& obj, const std::string& where,
                  const std::string& type, const char* list,
                  const std::function<void(const json&, const std::string&)>& load);

// The ids a post-processor (TemplateProcessing's single template, RobertaProcessing,
// BertProcessing, ByteLevel, Sequence; null: none) puts around the text, into *frame; ids must be
// tokens of the vocabulary: known[id] (the vocabulary may leave ids out between its tokens).
void LoadPostProcessor(const JsonFile& f, const json& p, const std::string& where,
                       const std::vector<bool>& known, SpecialFrame* frame);

// Gives `token` the id `v` (an entry of model.vocab or added_tokens, at `key`): checks that it is
// an integer below `limit` (the number of tokens: ids index arrays of that size) and that no
// other token has it; *tokens and *known (which ids have a token) grow to hold it.
int SetTokenId(const JsonFile& f, const std::string& key, const json& v, const std::string& token,
               std::size_t limit, std::vector<std::string>* tokens, std::vector<bool>* known);

}  // namespace cputrain::data
