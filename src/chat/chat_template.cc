// ChatTemplate, LoadChatTemplate, ApplyChatTemplate (chat_template.h) over the engine (jinja.h).
#include "chat/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "chat/jinja.h"
#include "common/error.h"
#include "common/files.h"
#include "data/tokenizer.h"
#include "fmt/format.h"
#include "fmt/ranges.h"

namespace cputrain::chat {

// One template: parsed, or why it cannot be used (a named one is refused only when chosen).
struct ChatTemplate::Program {
  std::string name;  // "" for a single template
  std::optional<jinja::Program> program;
  std::string problem;
  bool has_generation = false;
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

// transformers' test for whether masks can be made: a generation tag anywhere in the text.
bool HasGenerationTag(const std::string& text) {
  for (std::size_t at = text.find("{%"); at != std::string::npos; at = text.find("{%", at + 2)) {
    std::size_t k = at + 2;
    if (k < text.size() && text[k] == '-') ++k;
    while (k < text.size() && (text[k] == ' ' || text[k] == '\t' || text[k] == '\n' ||
                               text[k] == '\r' || text[k] == '\f' || text[k] == '\v'))
      ++k;
    if (text.compare(k, 10, "generation") == 0) return true;
  }
  return false;
}

std::string JsonKind(const Json& v) {
  return v.is_null()      ? "null"
         : v.is_boolean() ? "a boolean"
         : v.is_number()  ? "a number"
         : v.is_array()   ? "a list"
         : v.is_object()  ? "an object"
                          : "a string";
}

// tokenizer_config.json's chat_template list, as transformers' {t["name"]: t["template"]}: each
// entry an object with a string "name" and a "template" (refused at load, as transformers
// fails there too); a template that is not a string is kept as such, refused if chosen.
std::vector<std::pair<std::string, std::optional<std::string>>> NamedFromConfig(
    const Json& list, const std::string& path) {
  std::vector<std::pair<std::string, std::optional<std::string>>> named;
  for (std::size_t k = 0; k < list.size(); ++k) {
    const Json& t = list[k];
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() ||
        !t.contains("template")) {
      throw InputError(
          fmt::format("'{}': chat_template's entry {} is not an object with a string \"name\" and "
                      "a \"template\"",
                      path, k + 1),
          "write each named template as {\"name\": \"default\", \"template\": \"...\"}");
    }
    std::optional<std::string> text;
    if (t["template"].is_string()) text = t["template"].get<std::string>();
    named.emplace_back(t["name"].get<std::string>(), std::move(text));
  }
  return named;
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
    : source_(std::move(source)) {
  Program p;
  try {
    p.program = jinja::Parse(text);
  } catch (const jinja::RenderError& e) {
    throw InputError(
        fmt::format("{}, line {}: {}", source_, e.line, e.message),
        "the chat template uses Jinja that sft does not run (docs/sft.md lists what it does)");
  }
  p.has_generation = HasGenerationTag(text);
  programs_.push_back(std::move(p));
}

ChatTemplate::ChatTemplate(
    const std::vector<std::pair<std::string, std::optional<std::string>>>& named,
    std::string source)
    : source_(std::move(source)) {
  for (const auto& [name, text] : named) {
    Program p;
    p.name = name;
    if (!text) {
      p.problem = fmt::format("{}: the template named '{}' is not a string", source_, name);
    } else {
      try {
        p.program = jinja::Parse(*text);
        p.has_generation = HasGenerationTag(*text);
      } catch (const jinja::RenderError& e) {
        p.problem = fmt::format("{}, template '{}', line {}: {}", source_, name, e.line, e.message);
      }
    }
    auto same = std::find_if(programs_.begin(), programs_.end(),
                             [&p](const Program& q) { return q.name == p.name; });
    if (same != programs_.end()) {
      *same = std::move(p);  // a later entry of the same name replaces it, as in a dict
    } else {
      programs_.push_back(std::move(p));
    }
  }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;

bool ChatTemplate::has_generation_blocks() const {
  return std::any_of(programs_.begin(), programs_.end(),
                     [](const Program& p) { return p.has_generation; });
}

std::vector<std::string> ChatTemplate::names() const {
  std::vector<std::string> out;
  for (const Program& p : programs_) {
    if (!p.name.empty() || programs_.size() > 1) out.push_back(p.name);
  }
  return out;
}

namespace {

jinja::Dict Context(const Json& variables, const std::string& what) {
  jinja::Dict context;
  if (!variables.is_object())
    throw InputError(fmt::format("{}: the template's variables are not a JSON object", what));
  for (auto it = variables.begin(); it != variables.end(); ++it) {
    context.Set(it.key(), ToValue(it.value(), 0, what));
  }
  return context;
}

Rendered RenderProgram(const jinja::Program& program, const jinja::Dict& context,
                       const std::string& source, const std::string& what) {
  try {
    jinja::Output out = jinja::Render(program, context);
    return Rendered{std::move(out.text), std::move(out.generation)};
  } catch (const jinja::RenderError& e) {
    if (e.raised) {
      throw InputError(fmt::format("{}: the chat template ({}, line {}) refused it: {}", what,
                                   source, e.line, e.message));
    }
    throw InputError(
        fmt::format("{}: rendering the chat template ({}, line {}) failed: {}", what, source,
                    e.line, e.message),
        "the template or the data does something the template engine refuses (docs/sft.md, "
        "\"Chat templates\")");
  }
}

}  // namespace

Rendered ChatTemplate::Render(const Json& variables, const std::string& what,
                              const std::string* choice) const {
  const jinja::Dict context = Context(variables, what);
  const bool single = programs_.size() == 1 && programs_[0].name.empty();
  auto named = [&](const std::string& name) -> const Program* {
    for (const Program& p : programs_) {
      if (!single && p.name == name) return &p;
    }
    return nullptr;
  };
  const Program* chosen = nullptr;
  if (choice != nullptr) {
    chosen = named(*choice);
    if (chosen == nullptr) {  // not a name: the template's own text (transformers' rule)
      ChatTemplate own(*choice, what + "'s chat_template argument");
      return RenderProgram(*own.programs_[0].program, context, own.source_, what);
    }
  } else if (single) {
    chosen = &programs_[0];
  } else {
    const bool tools =
        variables.is_object() && variables.contains("tools") && !variables["tools"].is_null();
    chosen = tools ? named("tool_use") : nullptr;
    if (chosen == nullptr) chosen = named("default");
    if (chosen == nullptr) {
      throw InputError(
          fmt::format("{}: {} holds chat templates named {} but none named \"default\"{} "
                      "(transformers' apply_chat_template refuses this too)",
                      what, source_, fmt::join(names(), ", "),
                      tools ? "" : ", and the row passes no tools for a \"tool_use\" one"),
          "name one of them \"default\", or pass chat_template_kwargs {\"chat_template\": NAME}");
    }
  }
  if (!chosen->program) {
    throw InputError(fmt::format("{}: {}", what, chosen->problem),
                     "fix that template, or choose another (chat_template_kwargs' "
                     "\"chat_template\")");
  }
  return RenderProgram(
      *chosen->program, context,
      chosen->name.empty() ? source_ : fmt::format("{}, template '{}'", source_, chosen->name),
      what);
}

ChatTemplate LoadChatTemplate(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  const fs::path extra_dir = fs::path(dir) / "additional_chat_templates";
  const InputKind kind{"chat template", "a Jinja text file", kMaxConfigBytes * 16,
                       "check the tokenizer directory"};
  std::error_code ec;
  // Template files take the place of tokenizer_config.json's chat_template, as transformers
  // reads them: chat_template.jinja is "default", additional_chat_templates/NAME.jinja is NAME.
  std::vector<std::pair<std::string, std::optional<std::string>>> files;
  if (fs::exists(jinja_path, ec)) files.emplace_back("default", ReadFile(jinja_path, kind));
  if (fs::is_directory(extra_dir, ec)) {
    std::vector<fs::path> extra;
    for (const auto& entry : fs::directory_iterator(extra_dir, ec)) {
      if (entry.path().extension() == ".jinja") extra.push_back(entry.path());
    }
    std::sort(extra.begin(), extra.end());
    for (const fs::path& f : extra)
      files.emplace_back(f.stem().string(), ReadFile(f.string(), kind));
  }
  if (files.size() == 1 && files[0].first == "default")
    return ChatTemplate(*files[0].second, "'" + jinja_path + "'");
  if (!files.empty()) return ChatTemplate(files, "'" + dir + "' chat templates");
  if (fs::exists(config_path, ec)) {
    Json config = ReadJson(config_path);
    if (config.is_object() && config.contains("chat_template") &&
        !config["chat_template"].is_null()) {
      const Json& t = config["chat_template"];
      const std::string source = "'" + config_path + "' chat_template";
      if (t.is_string()) return ChatTemplate(t.get<std::string>(), source);
      if (t.is_array()) return ChatTemplate(NamedFromConfig(t, config_path), source);
      throw InputError(
          fmt::format("'{}': chat_template is {}, neither a string nor a list of "
                      "named templates",
                      config_path, JsonKind(t)));
    }
  }
  throw InputError(
      fmt::format("'{}' has no chat template (neither chat_template.jinja nor a chat_template in "
                  "tokenizer_config.json)",
                  dir),
      "use a chat model's tokenizer directory, or write its template to chat_template.jinja there");
}

namespace {

bool AllObjects(const Json& v) {
  return std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_object(); });
}

// render_jinja_template's tools: a list of JSON schemas (tool_schemas, a new list of them: an empty
// object or string gives an empty one); anything else raises there.
Json ToolSchemas(const Json& tools, const char* key, const std::string& what) {
  if (tools.is_null() || (tools.is_array() && AllObjects(tools))) return tools;
  if ((tools.is_object() && tools.empty()) ||
      (tools.is_string() && tools.get<std::string>().empty()))
    return Json::array();
  throw InputError(fmt::format("{}: \"{}\" is {}, not a list of JSON schemas (transformers: "
                               "Tools should either be a JSON schema, or a callable function)",
                               what, key, JsonKind(tools)),
                   "give tools as a list of {\"type\": \"function\", \"function\": {...}}");
}

// Documents are passed as they are, once transformers has checked each is a dict.
Json Documents(const Json& docs, const std::string& what) {
  if (docs.is_null() ||
      ((docs.is_array() || docs.is_object()) && AllObjects(docs) &&
       (docs.is_array() || docs.empty())) ||
      (docs.is_string() && docs.get<std::string>().empty()))
    return docs;
  throw InputError(
      fmt::format("{}: chat_template_kwargs' \"documents\" is {}, not a list of "
                  "objects (transformers: Documents should be a list of dicts)",
                  what, JsonKind(docs)));
}

}  // namespace

ChatCall MakeChatCall(const Json& special, Json messages, const Json& tools, const Json& kwargs,
                      bool add_generation_prompt, const std::string& what) {
  ChatCall call;
  call.variables = special.is_object() ? special : Json::object();
  Json& vars = call.variables;
  vars["messages"] = std::move(messages);
  vars["tools"] = ToolSchemas(tools, "tools", what);
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = add_generation_prompt;
  if (kwargs.is_null()) return call;
  if (!kwargs.is_object()) {
    throw InputError(
        fmt::format("{}: \"chat_template_kwargs\" is {}, not an object", what, JsonKind(kwargs)),
        "give the template's extra variables as an object, e.g. "
        "{\"enable_thinking\": false}");
  }
  // apply_chat_template's own arguments: TRL passes conversation and tools itself and transformers
  // passes messages (TypeError: multiple values); these change the tokenization, not the text.
  static const char* kTwice[] = {"messages", "conversation", "conversations",
                                 "tools",    "return_dict",  "return_assistant_tokens_mask"};
  static const char* kTokenizing[] = {"tokenize",
                                      "padding",
                                      "truncation",
                                      "max_length",
                                      "return_tensors",
                                      "tokenizer_kwargs",
                                      "continue_final_message"};
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
    const std::string& key = it.key();
    for (const char* k : kTwice) {
      if (key == k) {
        throw InputError(
            fmt::format("{}: chat_template_kwargs has \"{}\", which apply_chat_template already "
                        "gets from the row (transformers raises TypeError: got multiple values "
                        "for keyword argument '{}')",
                        what, key, key),
            key == "tools" ? "give the tools as the row's \"tools\"" : "drop that key");
      }
    }
    for (const char* k : kTokenizing) {
      if (key == k) {
        throw InputError(fmt::format("{}: chat_template_kwargs has \"{}\", an argument of "
                                     "apply_chat_template that changes how the text is tokenized "
                                     "or cut, not a template variable: not supported",
                                     what, key),
                         "drop that key (--max_length truncates rows)");
      }
    }
    if (key == "chat_template") {
      if (!it.value().is_string()) {
        throw InputError(
            fmt::format("{}: chat_template_kwargs' \"chat_template\" is {}, not a template's "
                        "name or text",
                        what, JsonKind(it.value())));
      }
      call.chat_template = it.value().get<std::string>();
      continue;
    }
    vars[key] = key == "documents" ? Documents(it.value(), what) : it.value();
  }
  return call;
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
                               const Json& variables, bool assistant_masks, const std::string& what,
                               const std::string* choice) {
  Rendered r = tmpl.Render(variables, what, choice);
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
