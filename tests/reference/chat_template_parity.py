"""Our chat templates (src/chat) against transformers' apply_chat_template.

    python chat_template_parity.py --render build/tests/reference/chat_render [--cache DIR]

Real templates are read at test time from llama.cpp's models/templates/, as the pinned
llama-cpp-python==0.3.36 source distribution ships them (PyPI; `pip download` into --cache,
outside the clone, once): Llama 3.1 / 3.2 / 3.3, Qwen2.5, Qwen3, Gemma 2, Phi-3.5, Mistral Nemo,
SmolLM3. (That sdist has no Gemma 3 or SmolLM2 template; Gemma 2's and the ChatML of Qwen2.5
are their closest kin.) Our own templates (OWN below) use every Jinja feature we support,
{% generation %} blocks included. For each template and each chat of CHATS, with and without
add_generation_prompt: the rendered text, the token ids and (for templates with generation
blocks) the assistant masks must be identical, through a byte-level BPE tokenizer made here
with the `tokenizers` library and holding the template's special tokens. A chat transformers
refuses (raise_exception, an undefined attribute) must be refused by ours too. UNSUPPORTED
lists constructs our loader must refuse by name. Exits 1 on the first difference, printing it.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tarfile

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

SDIST = "llama-cpp-python==0.3.36"
REAL = {
    "llama-3.1": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "llama-3.2": "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "llama-3.3": "meta-llama-Llama-3.3-70B-Instruct.jinja",
    "qwen2.5": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "qwen3": "Qwen-Qwen3-0.6B.jinja",
    "gemma-2": "google-gemma-2-2b-it.jinja",
    "phi-3.5": "microsoft-Phi-3.5-mini-instruct.jinja",
    "mistral-nemo": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "smollm3": "HuggingFaceTB-SmolLM3-3B.jinja",
}
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather at a place",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "the city"},
        "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}}

U, A, S = "user", "assistant", "system"


def m(role, content, **kw):
    return dict(role=role, content=content, **kw)


# (chat, extra template variables)
CHATS = [
    ([m(U, "Hello!")], {}),
    ([m(U, "Hi"), m(A, "Hello, how can I help?")], {}),
    ([m(S, "You are terse."), m(U, "2+2?"), m(A, "4"), m(U, "And 3+3?"), m(A, "6")], {}),
    ([m(U, "  spaces around  "), m(A, "\n\nleading newlines and trailing  \n")], {}),
    ([m(U, "Ünïcødé — 你好, мир 🙂"), m(A, "Ответ: ✓")], {}),
    ([m(U, "quotes ' \" and \\ backslash {{ not a tag }} {% nor this %}"), m(A, "ok")], {}),
    ([m(S, "sys"), m(U, "a"), m(A, "b")], {"date_string": "26 Jul 2024"}),
    ([m(U, "think"), m(A, "<think>\nstep by step\n</think>\n\nThe answer.")], {"enable_thinking": False}),
    ([m(U, "weather in Oslo?"), m(A, "", tool_calls=[CALL]), m("tool", "7 C"), m(A, "It is 7 C.")],
     {"tools": [WEATHER_TOOL]}),
    ([m(U, "weather?")], {"tools": [WEATHER_TOOL]}),
    ([m(A, "starts with the assistant")], {}),
    ([m(U, "a"), m(U, "b")], {}),
    ([m(S, "only a system message")], {}),
]

# Our own templates: every feature the engine supports, with generation blocks for the masks.
OWN = {
    "own-chatml-gen": (
        "{%- for message in messages %}\n"
        "    {%- if message.role == 'assistant' %}\n"
        "<|im_start|>assistant\n{% generation %}{{ message.content | trim }}<|im_end|>{% endgeneration %}\n"
        "    {%- else %}\n"
        "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"),
    "own-features": (
        "{#- every construct: comments, whitespace control, set, namespace, macros, loops -#}\n"
        "{%- set ns = namespace(n=0, last_user=-1, seen=[]) %}\n"
        "{%- macro block(role, text, sep='\\n') -%}<|{{ role | upper }}|>{{ sep }}{{ text }}{%- endmacro %}\n"
        "{%- for message in messages if message.role != 'tool' %}\n"
        "  {%- set ns.n = ns.n + 1 %}\n"
        "  {%- if message.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}\n"
        "  {%- set content = message.content if message.content is string else message.content | tojson %}\n"
        "  {%- if loop.first and message.role != 'system' %}<|sys|>default {{ loop.length }} {{ messages | length }}\n{% endif %}\n"
        "  {%- if message.role == 'assistant' %}\n"
        "    {{- block('assistant', '') }}{% generation %}{{ content.strip() }}"
        "{% if message.tool_calls is defined and message.tool_calls %}"
        "{% for c in message.tool_calls %}<call>{{ c.function | tojson(sort_keys=true) }}</call>{% endfor %}"
        "{% endif %}<|end|>{% endgeneration %}\n"
        "  {%- elif message.role in ['user', 'system'] %}\n"
        "    {{- block(message.role, content.lstrip().replace('\\n\\n', '\\n'), sep=' ') + '\\n' }}\n"
        "  {%- else %}{{ raise_exception('unknown role ' ~ message.role) }}\n"
        "  {%- endif %}\n"
        "  {%- if loop.last %}\n"
        "[n={{ ns.n }} last_user={{ ns.last_user }} rev={{ loop.revindex0 }} cyc={{ loop.cycle('a', 'b') }}"
        " prev={{ loop.previtem.role if loop.previtem is defined else '-' }}]\n"
        "  {%- endif %}\n"
        "{%- else %}(no messages)\n"
        "{%- endfor %}\n"
        "{%- if tools is defined and tools is not none %}\n"
        "{%- for t in tools %}\n"
        "tool {{ loop.index }}: {{ t.function.name }} {{ t.function.parameters.properties | dictsort | map('first') | join(',') }}"
        " {{ t.function.parameters.required | length }} {{ t | tojson(indent=2) | indent(2) }}\n"
        "{%- endfor %}\n"
        "{%- endif %}\n"
        "{%- set words = (messages | map(attribute='content') | select('string') | join(' ')).split() %}\n"
        "{{- '\\n' ~ (words | length) ~ ' ' ~ (words[:3] | join('/')) ~ ' ' ~ (words[-1:] | first | default('none')) }}\n"
        "{%- set roles = messages | map(attribute='role') | unique | list %}\n"
        "{{- ' ' ~ roles | sort | join(',') ~ ' ' ~ (messages | selectattr('role', 'equalto', 'user') | list | length) }}\n"
        "{{- ' ' ~ (messages | rejectattr('role', 'eq', 'user') | map(attribute='role') | list) }}\n"
        "{{- ' ' ~ [1, 2, 3][::-1] ~ ' ' ~ 'abc'[1:] ~ ' ' ~ (7 // 2) ~ (7 % 3) ~ (2 ** 5) ~ (7 / 2) ~ ' ' ~ (1 if 0 else 2) }}\n"
        "{{- ' ' ~ ({'b': 1, 'a': [1.5, none, true]} | tojson) ~ ' ' ~ {'k': (1,)} ~ ' ' ~ 'x'.startswith(('a', 'x')) }}\n"
        "{%- for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}\n"
        "{%- if add_generation_prompt %}\n<|ASSISTANT|>\n{%- endif %}"),
    # Generation blocks inside one another, a set block and a filter block: transformers
    # measures each from where the template's output is when the block is rendered.
    "own-nested-gen": (
        "{%- for message in messages %}\n"
        "  {%- if message.role == 'assistant' %}<A>{% generation %}[{% generation %}"
        "{{ message.content }}{% endgeneration %}]{% endgeneration %}"
        "{% set tail %}{% generation %}<end>{% endgeneration %}{% endset %}{{ tail }}\n"
        "  {%- else %}<{{ message.role }}>{% filter trim %} {{ message.content }}"
        "{% generation %}.{% endgeneration %}{% endfilter %}\n"
        "  {%- endif %}\n"
        "{%- endfor %}"),
}

UNSUPPORTED = {
    "{% include 'x.jinja' %}": "include",
    "{% extends 'base' %}": "extends",
    "{% import 'm' as m %}": "import",
    "{% block b %}{% endblock %}": "block",
    "{% call f() %}{% endcall %}": "call",
    "{% raw %}{{ x }}{% endraw %}": "raw",
    "{% with a = 1 %}{{ a }}{% endwith %}": "with",
    "{% for x in y recursive %}{% endfor %}": "recursive",
    "{{ x | wordwrap(5) }}": "wordwrap",
    "{{ x is test_that_does_not_exist }}": "test_that_does_not_exist",
    "{{ f(*args) }}": "*args",
    "{% macro f() %}{% generation %}x{% endgeneration %}{% endmacro %}": "generation",
}


def fetch_templates(cache):
    os.makedirs(cache, exist_ok=True)
    sdists = glob.glob(os.path.join(cache, "llama_cpp_python-0.3.36.tar.gz"))
    if not sdists:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary",
                        "llama-cpp-python", "--dest", cache, SDIST], check=True)
        sdists = glob.glob(os.path.join(cache, "llama_cpp_python-0.3.36.tar.gz"))
    out = {}
    with tarfile.open(sdists[0]) as tar:
        names = {os.path.basename(n): n for n in tar.getnames() if "/models/templates/" in n}
        for key, file in REAL.items():
            if file not in names:
                sys.exit(f"{SDIST} has no models/templates/{file}")
            out[key] = tar.extractfile(names[file]).read().decode("utf-8")
    return out


def special_tokens(template):
    found = set(re.findall(r"<\|[A-Za-z0-9_]+\|>|<\/?[a-z_]+>|\[/?[A-Z_]+\]", template))
    return sorted(found | {"<|endoftext|>", "<s>", "</s>"})


def make_tokenizer(out_dir, template, docs):
    specials = special_tokens(template)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700 + len(specials), special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(docs, trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<|endoftext|>",
              "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)
    return PreTrainedTokenizerFast.from_pretrained(out_dir)


def reference(tok, chat, variables, gen_prompt, masks):
    kw = dict(variables)
    tools = kw.pop("tools", None)
    try:
        text = tok.apply_chat_template(chat, tools=tools, tokenize=False, add_generation_prompt=gen_prompt, **kw)
        enc = tok.apply_chat_template(chat, tools=tools, tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=masks, add_generation_prompt=gen_prompt, **kw)
    except Exception as e:  # noqa: BLE001 - any refusal of transformers must be ours too
        return {"error": f"{type(e).__name__}: {e}"}
    out = {"text": text, "ids": list(enc["input_ids"])}
    if masks:
        out["masks"] = list(enc["assistant_masks"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--render", required=True)
    ap.add_argument("--cache", default=os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                                    "cputrain-numa", "sdist"))
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    import tempfile
    work = args.work or tempfile.mkdtemp(prefix="chat_parity_")
    templates = fetch_templates(args.cache)
    templates.update(OWN)
    docs = [json.dumps(c, ensure_ascii=False) for c, _ in CHATS] * 3
    proc = subprocess.Popen([args.render], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8")

    def ours(req):
        proc.stdin.write(json.dumps(req, ensure_ascii=False) + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    checked = refused = masked = 0
    for name, template in templates.items():
        d = os.path.join(work, name)
        tok = make_tokenizer(d, template, docs + [template])
        has_gen = re.search(r"\{%-?\s*generation\s*-?%\}", template) is not None
        for ci, (chat, variables) in enumerate(CHATS):
            for gen_prompt in (False, True):
                ref = reference(tok, chat, variables, gen_prompt, has_gen)
                got = ours({"template": None, "tokenizer": d, "masks": has_gen,
                            "variables": dict(variables, messages=chat, add_generation_prompt=gen_prompt)})
                where = f"{name}, chat {ci}, add_generation_prompt={gen_prompt}"
                if "error" in ref or "error" in got:
                    if ("error" in ref) != ("error" in got):
                        sys.exit(f"FAIL {where}: transformers: {ref.get('error', 'rendered')!r}; "
                                 f"ours: {got.get('error', 'rendered')!r}\nref text: {ref.get('text')!r}\nour text: {got.get('text')!r}")
                    refused += 1
                    continue
                for key in ("text", "ids") + (("masks",) if has_gen else ()):
                    if ref[key] != got[key]:
                        sys.exit(f"FAIL {where}: {key} differ\n transformers: {ref[key]!r}\n ours:         {got[key]!r}")
                if has_gen:
                    masked += sum(ref["masks"]) > 0
                checked += 1
    for template, feature in UNSUPPORTED.items():
        got = ours({"template": template, "tokenizer": None, "variables": {"messages": []}})
        if "error" not in got or feature not in got["error"]:
            sys.exit(f"FAIL: {template!r} must be refused naming {feature!r}; got {got!r}")
    proc.stdin.close()
    proc.wait()
    print(f"{len(templates)} templates x {len(CHATS)} chats x 2: {checked} renderings identical "
          f"(text, ids{', masks' if masked else ''}; {masked} with assistant tokens), {refused} refused by both; "
          f"{len(UNSUPPORTED)} unsupported constructs refused by name")


if __name__ == "__main__":
    main()
