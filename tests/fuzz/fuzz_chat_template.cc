// Fuzz target: the chat template engine (src/chat/jinja.h), on the input as a template's text.
// A template it accepts is rendered with a chat of a few messages (strings of several scripts,
// a tool call, numbers, an assistant message whose content is null) under small limits; it must
// render or refuse (RenderError), never crash, hang, leak or pass the limits (the step budget
// bounds its time: a loop with an empty body, a filter over a long list; the size limits its
// memory: a string or list doubled in a loop), and every {% generation %} span must start inside
// the output, the spans in order of their starts. What it renders is compared with Jinja2's by
// tests/reference/jinja_diff.py, which renders this corpus (and a grown one, --corpus) on both.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "chat/jinja.h"

namespace jinja = cputrain::chat::jinja;

namespace {

jinja::Value Message(const char* role, const char* content) {
  jinja::Value m = jinja::Value::MakeDict();
  m.dict->Set("role", jinja::Value::Str(role));
  m.dict->Set("content", jinja::Value::Str(content));
  return m;
}

jinja::Dict Context() {
  jinja::Value call = jinja::Value::MakeDict();
  call.dict->Set("name", jinja::Value::Str("f"));
  call.dict->Set("arguments", jinja::Value::List({jinja::Value::Int(1), jinja::Value::Float(2.5),
                                                  jinja::Value::None(), jinja::Value::Bool(true)}));
  jinja::Value assistant = Message("assistant", "  caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd\n");
  assistant.dict->Set("tool_calls", jinja::Value::List({call}));
  jinja::Value empty = Message("assistant", "");
  empty.dict->Set("content", jinja::Value::None());  // Mistral v0.3's tool-call turn
  jinja::Dict ctx;
  ctx.Set("messages",
          jinja::Value::List({Message("system", "be brief"), Message("user", "hi <s> {{x}}"),
                              assistant, Message("tool", "42"), empty}));
  ctx.Set("add_generation_prompt", jinja::Value::Bool(true));
  ctx.Set("bos_token", jinja::Value::Str("<s>"));
  ctx.Set("eos_token", jinja::Value::Str("</s>"));
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const jinja::Dict kContext = Context();
  const std::string text(reinterpret_cast<const char*>(data), size);
  jinja::Limits limits;
  limits.max_steps = 200000;
  limits.max_output = 1 << 20;
  limits.max_items = 20000;
  try {
    jinja::Program program = jinja::Parse(text);
    jinja::Output out = jinja::Render(program, kContext, limits);
    if (out.text.size() > limits.max_output) std::abort();
    std::size_t prev = 0;
    for (const auto& [b, e] : out.generation) {
      // In order of their starts; a block rendered into a set block's text may end past the
      // output (transformers measures it from where the output was), but never before it began.
      if (b < prev || e < b || b > out.text.size()) std::abort();
      prev = b;
    }
  } catch (const jinja::RenderError&) {
  }
  return 0;
}
