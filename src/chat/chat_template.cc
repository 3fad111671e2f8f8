// ChatTemplate, LoadChatTemplate, ApplyChatTemplate (chat_template.h) over the engine (jinja.h).
#include "chat/chat_template.h"

#include <filesystem>
#include <limits>

#include "chat/jinja.h"
#include "common/error.h"
#include "common/files.h"
#include "data/tokenizer.h"
#include "fmt/format.h"

namespace cputrain::chat {

struct ChatTemplate::Program {
  jinja::Program program;
};

namespace {

constexpr int kMaxJsonDepth = 64;

jinja::Value ToValue(const Json& j, int depth, const std::string& what) {
  using jinja::Value;
  if (depth > kMaxJsonDepth) {
    throw InputError(fmt::format("{}: the data nests deeper than {} levels", what, kMaxJsonDepth));
  }
  switch (j.type()) {
    case Json::value_t::null:
      return Value::None();
    case Json::value_t::boolean:
      return Value::Bool(j.get<bool>());
    case Json::value_t::number_integer:
      return Value::Int(j.get<int64_t>());
    case Json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        throw InputError(fmt::format("{}: the integer {} does not fit 64 bits", what, u));
      }
      return Value::Int(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float:
      return Value::Float(j.get<double>());
    case Json::value_t::string:
      return Value::Str(j.get<std::string>());
    case Json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const Json& x : j) items.push_back(ToValue(x, depth + 1, what));
      return Value::List(std::move(items));
    }
    case Json::value_t::object: {
      Value d = Value::MakeDict();
      for (auto it = j.begin(); it != j.end(); ++it)
        d.dict->Set(it.key(), ToValue(it.value(), depth + 1, what));
      return d;
    }
    default:
      throw InputError(fmt::format("{}: a JSON value of an unsupported type", what));
  }
}

// The template's text as a config value: a string, or [{name, template}, ...] of which
// "default".
std::string TemplateFromConfig(const Json& v, const std::string& path) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    for (const Json& t : v) {
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") &&
          t["template"].is_string()) {
        return t["template"].get<std::string>();
      }
    }
    throw InputError(
        fmt::format("'{}': chat_template lists named templates but none named 'default'", path),
        "name one of them \"default\", or write it to chat_template.jinja");
  }
  throw InputError(
      fmt::format("'{}': chat_template is neither a string nor a list of templates", path));
}

Json ReadJson(const std::string& path) {
  const InputKind kind{"tokenizer config", "a JSON file", kMaxJsonBytes,
                       "check the tokenizer directory"};
  try {
    return Json::parse(ReadFile(path, kind));
  } catch (const Json::exception& e) {
    throw InputError(fmt::format("'{}' is not valid JSON: {}", path, e.what()));
  }
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& text, std::string source)
    : text_(text), source_(std::move(source)) {
  try {
    program_ = std::make_unique<Program>(Program{jinja::Parse(text)});
  } catch (const jinja::RenderError& e) {
    throw InputError(
        fmt::format("{}, line {}: {}", source_, e.line, e.message),
        "the chat template uses Jinja that sft does not run (docs/sft.md lists what it does)");
  }
  // transformers' test for whether masks can be made: a generation tag anywhere.
  for (std::size_t at = text_.find("{%"); at != std::string::npos; at = text_.find("{%", at + 2)) {
    std::size_t k = at + 2;
    if (k < text_.size() && text_[k] == '-') ++k;
    while (k < text_.size() && (text_[k] == ' ' || text_[k] == '\t' || text_[k] == '\n' ||
                                text_[k] == '\r' || text_[k] == '\f' || text_[k] == '\v'))
      ++k;
    if (text_.compare(k, 10, "generation") == 0) has_generation_ = true;
  }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;

Rendered ChatTemplate::Render(const Json& variables, const std::string& what) const {
  jinja::Dict context;
  if (!variables.is_object())
    throw InputError(fmt::format("{}: the template's variables are not a JSON object", what));
  for (auto it = variables.begin(); it != variables.end(); ++it) {
    context.Set(it.key(), ToValue(it.value(), 0, what));
  }
  try {
    jinja::Output out = jinja::Render(program_->program, context);
    return Rendered{std::move(out.text), std::move(out.generation)};
  } catch (const jinja::RenderError& e) {
    if (e.raised) {
      throw InputError(fmt::format("{}: the chat template ({}, line {}) refused it: {}", what,
                                   source_, e.line, e.message));
    }
    throw InputError(fmt::format("{}: rendering the chat template ({}, line {}) failed: {}", what,
                                 source_, e.line, e.message));
  }
}

ChatTemplate LoadChatTemplate(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  std::error_code ec;
  if (fs::exists(jinja_path, ec)) {
    const InputKind kind{"chat template", "a Jinja text file", kMaxConfigBytes * 16,
                         "check the tokenizer directory"};
    return ChatTemplate(ReadFile(jinja_path, kind), "'" + jinja_path + "'");
  }
  if (fs::exists(config_path, ec)) {
    Json config = ReadJson(config_path);
    if (config.is_object() && config.contains("chat_template") &&
        !config["chat_template"].is_null()) {
      return ChatTemplate(TemplateFromConfig(config["chat_template"], config_path),
                          "'" + config_path + "' chat_template");
    }
  }
  throw InputError(
      fmt::format("'{}' has no chat template (neither chat_template.jinja nor a chat_template in "
                  "tokenizer_config.json)",
                  dir),
      "use a chat model's tokenizer directory, or write its template to chat_template.jinja there");
}

Json SpecialTokenVariables(const std::string& dir) {
  namespace fs = std::filesystem;
  static const char* kKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                "pad_token", "cls_token", "mask_token"};
  Json out = Json::object();
  auto take = [&](const Json& cfg) {
    if (!cfg.is_object()) return;
    for (const char* k : kKeys) {
      if (out.contains(k) || !cfg.contains(k)) continue;
      const Json& v = cfg[k];
      if (v.is_string()) out[k] = v;
      if (v.is_object() && v.contains("content") && v["content"].is_string()) out[k] = v["content"];
    }
    if (!out.contains("additional_special_tokens") && cfg.contains("additional_special_tokens") &&
        cfg["additional_special_tokens"].is_array() && !cfg["additional_special_tokens"].empty()) {
      Json list = Json::array();
      for (const Json& v : cfg["additional_special_tokens"]) {
        if (v.is_string()) list.push_back(v);
        if (v.is_object() && v.contains("content")) list.push_back(v["content"]);
      }
      out["additional_special_tokens"] = list;
    }
  };
  std::error_code ec;
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    std::string path = (fs::path(dir) / name).string();
    if (fs::exists(path, ec)) take(ReadJson(path));
  }
  return out;
}

std::vector<std::pair<std::size_t, std::size_t>> TokenSpans(const data::Tokenizer& tokenizer,
                                                            const std::string& text,
                                                            const std::vector<int>& ids) {
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  spans.reserve(ids.size());
  std::size_t pos = 0;
  for (std::size_t k = 0; k < ids.size(); ++k) {
    std::string piece = tokenizer.DecodeContinuation(&ids[k], 1);
    if (text.compare(pos, piece.size(), piece) == 0) {
      spans.emplace_back(pos, pos + piece.size());
      pos += piece.size();
    } else if (!piece.empty() && piece[0] == ' ' &&
               text.compare(pos, piece.size() - 1, piece, 1) == 0) {
      spans.emplace_back(pos, pos + piece.size() - 1);  // a prepended ▁ (SentencePiece)
      pos += piece.size() - 1;
    } else {
      throw InputError(
          fmt::format("the tokens of '{}' do not spell the text they encode (token {} at byte {}), "
                      "so assistant masks cannot be placed",
                      tokenizer.name(), k, pos),
          "use a tokenizer whose pipeline keeps the text (no normalizer that rewrites it)");
    }
  }
  if (pos != text.size()) {
    throw InputError(
        fmt::format("the tokens of '{}' spell {} of the text's {} bytes, so assistant masks cannot "
                    "be placed",
                    tokenizer.name(), pos, text.size()));
  }
  return spans;
}

ChatEncoding ApplyChatTemplate(const ChatTemplate& tmpl, const data::Tokenizer& tokenizer,
                               const Json& variables, bool assistant_masks,
                               const std::string& what) {
  Rendered r = tmpl.Render(variables, what);
  ChatEncoding enc;
  tokenizer.Encode(r.text, &enc.ids);
  if (!assistant_masks) return enc;
  enc.assistant_masks.assign(enc.ids.size(), 0);
  if (r.generation.empty()) return enc;
  const auto spans = TokenSpans(tokenizer, r.text, enc.ids);
  // char_to_token: the first token whose span holds the character starting at byte b.
  auto token_at = [&](std::size_t b) -> long {
    auto it = std::upper_bound(
        spans.begin(), spans.end(), b,
        [](std::size_t x, const std::pair<std::size_t, std::size_t>& s) { return x < s.second; });
    for (; it != spans.end() && it->first <= b; ++it) {
      if (b < it->second) return static_cast<long>(it - spans.begin());
    }
    return -1;
  };
  for (const auto& [begin, end] : r.generation) {
    long start_token = begin < r.text.size() ? token_at(begin) : -1;
    // The last character of the block: its first byte.
    std::size_t last = end;
    if (last > 0) {
      --last;
      while (last > 0 && (static_cast<unsigned char>(r.text[last]) & 0xC0) == 0x80) --last;
    }
    long end_token = end > 0 ? token_at(last) : -1;
    if (start_token < 0) break;
    // transformers: range(start, end_token + 1 if end_token else len(ids)); 0 and None are
    // both false there.
    long stop = end_token > 0 ? end_token + 1 : static_cast<long>(enc.ids.size());
    for (long t = start_token; t < stop; ++t) enc.assistant_masks[static_cast<std::size_t>(t)] = 1;
  }
  return enc;
}

}  // namespace cputrain::chat
