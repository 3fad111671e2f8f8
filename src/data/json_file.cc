#include "data/json_file.h"

namespace cputrain::data {

bool LoadSequence(const JsonFile& f, const json& obj, const std::string& where,
                  const std::string& type, const char* list,
                  const std::function<void(const json&, const std::string&)>& load) {
  if (type != "Sequence") return false;
  const json& items = f.Array(obj, where, list);
  for (std::size_t i = 0; i < items.size(); ++i) {
    load(items[i], fmt::format("{}.{}[{}]", where, list, i));
  }
  return true;
}

void LoadPostProcessor(const JsonFile& f, const json& p, const std::string& where,
                       const std::vector<bool>& known, SpecialFrame* frame) {
  // An id the vocabulary gives a token (Decode fails on any other).
  auto is_token = [&](const json& id) {
    return id.is_number_integer() && id.get<int64_t>() >= 0 &&
           static_cast<uint64_t>(id.get<int64_t>()) < known.size() && known[id.get<int64_t>()];
  };
  if (p.is_null()) return;
  const std::string type = f.Type(p, where);
  if (LoadSequence(f, p, where, type, "processors", [&](const json& item, const std::string& key) {
        LoadPostProcessor(f, item, key, known, frame);
      })) {
    return;
  }
  if (type == "ByteLevel") {
    // Only offsets change.
  } else if (type == "TemplateProcessing") {
    const json& single = f.Array(p, where, "single");
    const json& specials = f.At(p, where, "special_tokens");
    bool seen_text = false;
    *frame = SpecialFrame{};
    for (std::size_t i = 0; i < single.size(); ++i) {
      const std::string item = fmt::format("{}.single[{}]", where, i);
      if (single[i].contains("Sequence")) {
        if (f.Str(single[i]["Sequence"], item + ".Sequence", "id") != "A" || seen_text) {
          f.Fail(item, "the single template must hold the sequence $A once");
        }
        seen_text = true;
        continue;
      }
      const std::string name = f.Str(f.At(single[i], item, "SpecialToken"), item, "id");
      const json& special = f.At(specials, where + ".special_tokens", name.c_str());
      const json& ids = f.Array(special, where + ".special_tokens." + name, "ids");
      for (const json& id : ids) {
        if (!is_token(id)) {
          f.Fail(where + ".special_tokens." + name + ".ids",
                 fmt::format("{} is not an id of this vocabulary", id.dump()));
        }
        (seen_text ? frame->after : frame->before).push_back(id.get<int>());
      }
    }
    if (!seen_text) f.Fail(where + ".single", "has no $A");
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto id_of = [&](const char* key) {
      const json& pair = f.At(p, where, key);
      if (!pair.is_array() || pair.size() != 2 || !is_token(pair[1])) {
        f.Fail(JsonFile::Key(where, key), "is not [token, id] with an id of this vocabulary");
      }
      return pair[1].get<int>();
    };
    *frame = SpecialFrame{{id_of("cls")}, {id_of("sep")}};
  } else {
    f.Fail(where + ".type",
           fmt::format("post-processor '{}' is not supported (supported: TemplateProcessing, "
                       "RobertaProcessing, BertProcessing, ByteLevel, Sequence)",
                       type));
  }
}

int SetTokenId(const JsonFile& f, const std::string& key, const json& v, const std::string& token,
               std::size_t limit, std::vector<std::string>* tokens, std::vector<bool>* known) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
      static_cast<uint64_t>(v.get<int64_t>()) >= limit) {
    f.Fail(key, fmt::format("the id of '{}' is not an integer in [0, {}) (the number of tokens)",
                            token, limit));
  }
  const int id = v.get<int>();
  if (static_cast<std::size_t>(id) >= tokens->size()) {
    tokens->resize(id + 1);
    known->resize(id + 1, false);
  }
  if ((*known)[id] && (*tokens)[id] != token) {
    f.Fail(key, fmt::format("id {} is given to both '{}' and '{}'", id, (*tokens)[id], token));
  }
  (*tokens)[id] = token;
  (*known)[id] = true;
  return id;
}

}  // namespace cputrain::data
