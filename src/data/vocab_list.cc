#include "data/vocab_list.h"

#include <fmt/format.h>

#include <filesystem>

#include "common/error.h"
#include "data/hf_tokenizer.h"
#include "data/json_file.h"

namespace cputrain::data {
namespace {

namespace fs = std::filesystem;

constexpr char kHint[] =
    "pass the model's Hugging Face tokenizer: a directory holding tokenizer.json (and "
    "tokenizer_config.json), as save_pretrained writes it";

// The chat template: tokenizer_config.json's "chat_template" (a string), else
// chat_template.jinja, else chat_template.json's "chat_template", as transformers looks for it.
std::string ChatTemplate(const JsonFile& cf, const json& config, const fs::path& dir) {
  if (config.contains("chat_template") && !config["chat_template"].is_null()) {
    if (!config["chat_template"].is_string()) {
      cf.Fail("chat_template",
              "is not a string (a list of named templates is not exported: llama.cpp's "
              "tokenizer.chat_template holds one)",
              "keep the default template as a string in tokenizer_config.json");
    }
    return config["chat_template"].get<std::string>();
  }
  std::error_code ec;
  if (fs::is_regular_file(dir / "chat_template.jinja", ec)) {
    return ReadFile((dir / "chat_template.jinja").string(),
                    InputKind{"chat template", "a Jinja file", kMaxConfigBytes, kHint});
  }
  if (fs::is_regular_file(dir / "chat_template.json", ec)) {
    const JsonFile jf((dir / "chat_template.json").string(), kHint);
    const json j = jf.Parse();
    if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string()) {
      return j["chat_template"].get<std::string>();
    }
    jf.Fail("chat_template", "is missing or not a string");
  }
  return "";
}

// What tokenizer_config.json adds to the tokenizer's own lists: pad and unk, the tokens it names
// (kControl in a SentencePiece vocabulary, as transformers' all_special_ids), the chat template.
void ApplyConfig(const fs::path& dir, VocabList* v) {
  std::error_code ec;
  const fs::path path = dir / "tokenizer_config.json";
  if (!fs::exists(path, ec)) return;
  const JsonFile cf(path.string(), kHint);
  const json config = cf.Parse();
  if (!config.is_object()) cf.Fail("(top level)", "is not a JSON object");
  // An added token's id by its content (convert_hf_to_gguf.py's SpecialVocab looks there).
  auto id_of = [&](const std::string& content) {
    for (std::size_t id = 0; id < v->tokens.size(); ++id) {
      const VocabList::Kind k = v->kinds[id];
      if (v->tokens[id] == content &&
          (k == VocabList::Kind::kControl || k == VocabList::Kind::kUserDefined)) {
        return static_cast<int>(id);
      }
    }
    return -1;
  };
  std::vector<std::string> named;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token",
                          "cls_token", "mask_token"}) {
    named.push_back(ConfigToken(cf, config, key));
  }
  const json& extra = cf.Array(config, "", "additional_special_tokens");
  for (std::size_t i = 0; i < extra.size(); ++i) {
    named.push_back(extra[i].is_string()
                        ? extra[i].get<std::string>()
                        : cf.Str(extra[i], "additional_special_tokens", "content"));
  }
  if (!named[2].empty()) v->unk = id_of(named[2]);
  if (!named[3].empty()) v->pad = id_of(named[3]);
  if (v->model == VocabList::Model::kSentencePieceBpe) {
    for (const std::string& name : named) {
      if (name.empty()) continue;
      for (std::size_t id = 0; id < v->tokens.size(); ++id)
        if (v->tokens[id] == name && v->kinds[id] != VocabList::Kind::kUnused)
          v->kinds[id] = VocabList::Kind::kControl;
    }
  }
  v->chat_template = ChatTemplate(cf, config, dir);
}

}  // namespace

VocabList ListVocab(const std::string& tokenizer, int vocab_size) {
  std::error_code ec;
  const bool is_dir = fs::is_directory(tokenizer, ec);
  const fs::path file = is_dir ? fs::path(tokenizer) / "tokenizer.json" : fs::path(tokenizer);
  if (!fs::is_regular_file(file, ec)) {
    throw InputError(fmt::format("'{}' is not a Hugging Face tokenizer.json{}", tokenizer,
                                 is_dir ? " directory (it has no tokenizer.json)" : ""),
                     kHint);
  }
  std::unique_ptr<Tokenizer> t = MakeTokenizer(file.string());
  const auto* hf = dynamic_cast<const HfTokenizer*>(t.get());
  if (hf == nullptr) {
    throw InputError(fmt::format("'{}' is a {} tokenizer, not a BPE one: its vocabulary is not "
                                 "listed for export",
                                 file.string(), t->name()),
                     "GGUF export takes byte-level or SentencePiece-style BPE tokenizers "
                     "(docs/gguf.md)");
  }
  VocabList v = hf->List();
  ApplyConfig(file.parent_path(), &v);
  if (vocab_size > 0) {
    if (v.tokens.size() > static_cast<std::size_t>(vocab_size)) {
      throw InputError(fmt::format("'{}' has {} tokens, more than the model's vocabulary of {}",
                                   file.string(), v.tokens.size(), vocab_size),
                       "pass the tokenizer the model was trained with");
    }
    v.tokens.resize(vocab_size);
    v.kinds.resize(vocab_size, VocabList::Kind::kUnused);
  }
  for (std::size_t id = 0; id < v.tokens.size(); ++id) {
    if (v.kinds[id] == VocabList::Kind::kUnused) v.tokens[id] = fmt::format("[PAD{}]", id);
  }
  return v;
}

}  // namespace cputrain::data
