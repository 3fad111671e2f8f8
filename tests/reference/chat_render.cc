// Renders chats with our chat templates for tests/reference/chat_template_parity.py: one JSON
// request a line on stdin, one JSON answer a line on stdout.
//
//   request  {"template": TEXT, "tokenizer": DIR or null, "variables": {...}, "masks": bool}
//            ("template": null takes DIR's own, LoadChatTemplate; "variables" gets DIR's special
//            tokens first, as transformers' special_tokens_map)
//   answer   {"text": ..., "generation": [[begin, end] in bytes...], "ids": [...],
//             "masks": [...]} (ids and masks with a tokenizer), or {"error": MESSAGE}
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "chat/chat_template.h"
#include "common/error.h"
#include "data/tokenizer.h"

using cputrain::chat::Json;

int main() {
  std::map<std::string, std::unique_ptr<cputrain::data::Tokenizer>> tokenizers;
  std::string line;
  while (std::getline(std::cin, line)) {
    Json out;
    try {
      Json req = Json::parse(line);
      std::string dir = req["tokenizer"].is_string() ? req["tokenizer"].get<std::string>() : "";
      Json vars = dir.empty() ? Json::object() : cputrain::chat::SpecialTokenVariables(dir);
      for (auto it = req["variables"].begin(); it != req["variables"].end(); ++it)
        vars[it.key()] = it.value();
      auto tmpl = req["template"].is_string()
                      ? cputrain::chat::ChatTemplate(req["template"].get<std::string>(),
                                                     "the request's template")
                      : cputrain::chat::LoadChatTemplate(dir);
      if (dir.empty()) {
        cputrain::chat::Rendered r = tmpl.Render(vars, "the request");
        out["text"] = r.text;
        out["generation"] = r.generation;
      } else {
        auto& tok = tokenizers[dir];
        if (!tok) tok = cputrain::data::MakeTokenizer(dir);
        cputrain::chat::Rendered r = tmpl.Render(vars, "the request");
        out["text"] = r.text;
        out["generation"] = r.generation;
        auto enc = cputrain::chat::ApplyChatTemplate(tmpl, *tok, vars, req.value("masks", false),
                                                     "the request");
        out["ids"] = enc.ids;
        out["masks"] = enc.assistant_masks;
      }
    } catch (const cputrain::Error& e) {
      out = Json::object();
      out["error"] = e.what();
    } catch (const Json::exception& e) {
      out = Json::object();
      out["error"] = std::string("bad request: ") + e.what();
    }
    std::cout << out.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n" << std::flush;
  }
  return 0;
}
