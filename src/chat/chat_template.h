// Chat templates: the Jinja text a Hugging Face tokenizer carries (chat_template.jinja, or
// tokenizer_config.json's "chat_template"), rendered as transformers' apply_chat_template does,
// and tokenized with its assistant masks (return_assistant_tokens_mask: the tokens inside
// {% generation %} blocks). tests/reference/chat_template_parity.py checks the text, the ids and
// the masks against transformers on real models' templates and on our own that use every
// feature we support.
//
// The engine (jinja.h) runs the Jinja2 subset chat templates use, with transformers' settings
// (trim_blocks, lstrip_blocks, its tojson, raise_exception, strftime_now, loop controls,
// {% generation %}); anything else is refused by name when the template is loaded, as an
// InputError naming the template's source and line. docs/sft.md lists what is supported.
//
// Thread safety: a ChatTemplate is immutable once made; Render and ApplyChatTemplate may run on
// many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cputrain::data {
class Tokenizer;
}

namespace cputrain::chat {

using Json = nlohmann::ordered_json;

struct Rendered {
  std::string text;
  // [begin, end) byte offsets in text of each {% generation %} block transformers tracks.
  std::vector<std::pair<std::size_t, std::size_t>> generation;
};

class ChatTemplate {
 public:
  // Parses `text`; `source` names it in messages ("models/x/tokenizer_config.json's
  // chat_template"). Throws InputError naming source, line and the construct.
  ChatTemplate(const std::string& text, std::string source);
  // Named templates, as a tokenizer holds a list in tokenizer_config.json's chat_template or
  // additional_chat_templates/NAME.jinja files: (name, text) pairs, a later name replacing an
  // earlier one as transformers' dict does; a text that is not a string (nullopt) or that we do
  // not run is refused when a rendering chooses it, as transformers compiles only the one it uses.
  ChatTemplate(const std::vector<std::pair<std::string, std::optional<std::string>>>& named,
               std::string source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;

  // Renders with `variables` (messages, add_generation_prompt, tools, bos_token, ...: what
  // apply_chat_template passes). `what` names the data in messages ("row 12 of train.jsonl").
  // Which template, as transformers' get_chat_template: `choice` (apply_chat_template's
  // chat_template argument) when given, the named template it names or else a template's own
  // text; without it, "tool_use" when the variables' tools are not null and there is one, else
  // "default" (refused where there is none).
  // A raise_exception() of the template, or a fault Python would raise, is an InputError naming
  // what, the source, the line and the template's message.
  Rendered Render(const Json& variables, const std::string& what,
                  const std::string* choice = nullptr) const;
  const std::string& source() const { return source_; }
  // Whether a template (any of the named ones) has {% generation %} blocks.
  bool has_generation_blocks() const;
  // The names of named templates (empty for a single template).
  std::vector<std::string> names() const;

 private:
  struct Program;
  std::vector<Program> programs_;  // one, named "", for a single template
  std::string source_;
};

// A tokenizer directory's chat template, as transformers 4.55 loads it: chat_template.jinja
// (named "default") and additional_chat_templates/NAME.jinja, if any, else
// tokenizer_config.json's chat_template (a string, or a list of {"name", "template"}). Throws
// InputError when there is none, naming the directory.
ChatTemplate LoadChatTemplate(const std::string& dir);

// apply_chat_template(messages, tools=tools, **kwargs) as TRL calls it for a row: the template's
// variables (the special tokens, messages, tools, documents, add_generation_prompt, then the
// kwargs, which may replace any but messages) and the chat_template argument if the kwargs name
// one. A kwarg transformers refuses (messages, tools: given twice) or one that changes
// the tokenization rather than the template (tokenize, padding, max_length, ...) is an
// InputError naming `what` and the key, as are tools or documents that are not lists of objects.
struct ChatCall {
  Json variables;
  std::optional<std::string> chat_template;
};
ChatCall MakeChatCall(const Json& special, Json messages, const Json& tools, const Json& kwargs,
                      bool add_generation_prompt, const std::string& what);

// The variables transformers adds from the tokenizer's special_tokens_map (bos_token,
// eos_token, unk_token, sep_token, pad_token, cls_token, mask_token,
// additional_special_tokens), read from tokenizer_config.json (special_tokens_map.json for
// those it lacks).
Json SpecialTokenVariables(const std::string& dir);

struct ChatEncoding {
  std::vector<int> ids;
  std::vector<uint8_t> assistant_masks;  // empty unless asked for
};

// tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
// return_assistant_tokens_mask=assistant_masks, **variables): renders, encodes the text
// without added special tokens, and marks the tokens of each generation block as transformers
// does through char_to_token (the token holding the block's first character through the one
// holding its last; a block whose start has no token ends the marking).
ChatEncoding ApplyChatTemplate(const ChatTemplate& tmpl, const data::Tokenizer& tokenizer,
                               const Json& variables, bool assistant_masks, const std::string& what,
                               const std::string* choice = nullptr);

// Each id's [begin, end) bytes in `text`, where Encode(text) gave `ids`: the pieces the ids
// decode to, laid along the text (a SentencePiece-style tokenizer's prepended space takes no
// byte). Throws InputError if the pieces do not spell the text.
std::vector<std::pair<std::size_t, std::size_t>> TokenSpans(const data::Tokenizer& tokenizer,
                                                            const std::string& text,
                                                            const std::vector<int>& ids);

}  // namespace cputrain::chat
