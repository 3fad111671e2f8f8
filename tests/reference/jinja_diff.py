"""Our Jinja engine (src/chat) against Jinja2 as transformers runs chat templates: a differential
test of the template language itself, construct by construct.

    python jinja_diff.py --render build/tests/reference/chat_render [--count N] [--seed S]
                         [--corpus DIR ...] [--show N]

Jinja2's side is transformers' own environment (transformers.utils.chat_template_utils.
_compile_jinja_template: ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, loop
controls, {% generation %}, its tojson, raise_exception and strftime_now), rendered with the
variables apply_chat_template passes (messages, tools, documents, add_generation_prompt and the
special tokens). Ours is chat_render (tests/reference/chat_render.cc), one request a line.

Rendered are: FIXED below (the constructs issue 43 found wrong, and the named constructs around
them), --count snippets drawn by a seeded generator of expressions and statements over the
literals, filters, tests, methods and operators chat templates use, and every file of each
--corpus directory (the fuzz seeds of tests/fuzz/corpus/chat_template by default; give the
corpus a libFuzzer run grew to compare its finds as well).

The rule (docs/sft.md, "Chat templates"): our engine matches Jinja2 on every construct it
accepts, or refuses by name. So a snippet fails when both render and the texts differ, or when
ours renders what Jinja2 raises on; ours refusing what Jinja2 renders is allowed (counted, and
the commonest refusals printed). FIXED entries may also demand more: that ours renders (the
constructs we claim), or that its refusal names a given word. Exits 1 listing every failure.
"""
import argparse
import collections
import json
import multiprocessing
import os
import random
import resource
import subprocess
import sys
import time
import warnings

from transformers.utils.chat_template_utils import _compile_jinja_template

TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather <at> a place",
                                         "parameters": {"type": "object", "properties": {
                                             "city": {"type": "string"}}, "required": ["city"]}}}
VARIABLES = {
    "messages": [
        {"role": "system", "content": "Be brief & kind."},
        {"role": "user", "content": "Émile says <hi> 'there'\n  twice"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                          "arguments": {"city": "Oslo", "n": 2}}}]},
        {"role": "tool", "content": "7 C"},
        {"role": "assistant", "content": "It is 7 C. ΑΣ straße 你好 🙂"},
    ],
    "tools": [TOOL],
    "documents": None,
    "add_generation_prompt": True,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "n": 3,
    "f": 2.5,
    "s": "a<b> & 'c'",
    "d": {"b": 1, "a": [1.5, None, True], "k": "v"},
    "e": [],
    "z": None,
}

# (template, expectation): "same" - ours must render it, as Jinja2 does; "either" - render the
# same or refuse; any other string - ours must refuse, naming it.
FIXED = [
    # issue 43, item 6: the twelve snippets, and None through the filters that take iterables.
    ("{{ (-1)**3 }} {{ (-2)**3 }} {{ 0**0 }} {{ (-1)**0 }} {{ 1**100 }} {{ 2**-1 }}", "same"),
    ("{{ 2.675|round(2) }} {{ 0.125|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ -0.5|round }}", "same"),
    ("{{ 1234.5|round(-2) }} {{ 25|round(-1) }} {{ 5|round }} {{ 5|round(2) }} {{ true|round }}", "same"),
    ("{{ 2.675|round(2, 'floor') }} {{ 2.671|round(1, 'ceil') }} {{ 7|round(0, 'floor') }}", "same"),
    ("{{ 'nan'|int }} {{ 'NaN'|float }} {{ '1_000'|int }} {{ '1_000.5'|float }} {{ '1__0'|int }}", "same"),
    ("{{ ' 42 '|int }} {{ '+7'|int }} {{ '-0'|int }} {{ '42.9'|int }} {{ '1e3'|int }} {{ '0x10'|int }}", "same"),
    ("{{ '007'|int }} {{ '_1'|int }} {{ '1_'|int }} {{ 'inf'|float }} {{ '-Infinity'|float }} {{ ''|int(5) }}", "same"),
    ("{{ 3.9|int }} {{ -3.9|int }} {{ true|int }} {{ none|int }} {{ [1]|int(7) }} {{ '4.5'|float }}", "same"),
    ("{{ 'Émile'|capitalize }} {{ 'ÉCOLE'|capitalize }} {{ 'ΑΣ'|capitalize }} {{ 'hELLO wORLD'|capitalize }}", "same"),
    ("{{ 'émile'.capitalize() }} {{ 'ǆemal'.capitalize() }}", "same"),
    ("{{ ['\x01\x7f\u0085\u00a0\u00ad\u0378\u200b\u2028\ue000\U0001F600\U000E0001\U0010FFFF'] }}", "same"),
    ("{{ [\"it's\", 'say \"hi\"', 'both \\' \"', '\\\\'] }}", "same"),
    ("{{ d.keys() }} {{ d.values() }} {{ d.items() }} {{ d.keys()|list }} {{ d.items()|length }}", "same"),
    ("{{ 'a' in d.keys() }} {{ d.keys()|first }} {{ d.values()|last }} {{ d.items()|sort|first }}", "same"),
    ("{{ 'a<b'|e|e }} {{ 'a<b'|safe|e }} {{ 'a<b'|escape|escape }} {{ ('a<b'|safe) + '<' }}", "same"),
    ("{{ '<' + ('a<b'|safe) }} {{ ('<'|e) ~ '<' }} {{ ('<'|e)|upper|e }} {{ ['<'|e, '<'|safe] }}", "same"),
    ("{{ ('<b>'|safe) is escaped }} {{ '<b>' is escaped }} {{ 5|safe + '<' }} {{ (none|e) ~ '' }}", "same"),
    ("{{ d|tojson(indent=100) }}", "same"),
    ("{{ d|tojson(indent=0) }}|{{ d|tojson(indent=-1) }}|{{ [1, [2]]|tojson(indent=3) }}", "same"),
    ("{{ ('x'|center(2000000))|length }} {{ 'ab'|center(7) }}|{{ 'abc'|center(6) }}|{{ 'é'|center(4) }}", "same"),
    ("{{ z|select|list }} {{ z|reject|list }} {{ z|selectattr('a')|list }} {{ z|rejectattr('a')|list }}", "same"),
    ("{{ z|map('upper')|list }} {{ z|map(attribute='a')|list }} {{ 0|select|list }} {{ ''|map('x')|list }}", "same"),
    ("{{ undefined_name|select|list }} {{ e|map(attribute='a')|list }}", "same"),
    ("{% for m in messages %}{{ m.content|select|list|length }},{% endfor %}", "same"),
    ("{{ messages|map(attribute='content')|select|list|length }}", "same"),
    ("{{ messages|selectattr('content')|map(attribute='role')|join(',') }}", "same"),
    ("{{ messages|rejectattr('content', 'none')|list|length }}", "same"),
    ("{{ 5|select|list }}", "either"),
    # issue 43, items 3 and 4: budgets, refused by name.
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps"),
    ("{% set s = 'ab' %}" + "{% set s = s ~ s %}" * 40 + "{{ s|length }}", "bytes"),
    ("{% set s = 'ab' %}" + "{% set s = s + s %}" * 40 + "{{ s|length }}", "bytes"),
    ("{% set l = [1] %}" + "{% set l = l + l %}" * 40 + "{{ l|length }}", "items"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "bytes"),
    ("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", "items"),
    ("{{ ('ab' * 1000000000000)|length }}", "bytes"),
    ("{{ ([1, 2] * 100000000)|length }}", "items"),
    ("{{ (['ab'] * 1000000)|join|length }}", "same"),
    ("{{ 'ab'|center(1000000000) }}", "bytes"),
    ("{{ d|tojson(indent=1000000000) }}", "bytes"),
    ("{{ 'x'|indent(1000000000, true) }}", "bytes"),
    ("{{ ('ab' * 1000)|length }} {{ ([1] * 1000)|length }} {{ 'ab'|center(100000)|length }}", "same"),
    # Named constructs around them.
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ -7.5 // 2 }} {{ 7.5 % -2 }} {{ 2 ** 62 }} {{ 1.5 ** 2 }}", "same"),
    ("{{ 10 / 4 }} {{ 1e308 * 10 }} {{ -1e308 * 10 }} {{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 2 ** 0.5 }}", "same"),
    ("{{ 9007199254740993 == 9007199254740992.0 }} {{ 9007199254740993 > 9007199254740992.0 }}", "same"),
    ("{{ [1, 2] == [1, 2] }} {{ (1, 2) == [1, 2] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }}", "same"),
    ("{{ 'abc'[::-1] }} {{ 'abc'[1:] }} {{ [1, 2, 3][-2:] }} {{ 'héllo'[1] }} {{ (1,) }} {{ () }}", "same"),
    ("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'x'.join(['1', '2']) }}", "same"),
    ("{{ ' xx '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'hello'.replace('l', 'L', 1) }}|{{ 'abc'.find('c') }}", "same"),
    ("{{ 'Hello World'.title() }} {{ 'hello world'|title }} {{ 'HeLLo'|lower }} {{ 'HeLLo'|upper }}", "same"),
    ("{{ 'ÀÉÎ'|lower }} {{ 'ΟΔΟΣ ΑΣ'|lower }} {{ 'İ'|lower|length }}", "same"),
    ("{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'a']|sort }} {{ ['b', 'A', 'a']|sort(case_sensitive=true) }}", "same"),
    ("{{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ {'b': 2, 'a': 1}|dictsort(by='value') }}", "same"),
    ("{{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum }} {{ [1, 2]|sum(start=10) }} {{ [3, 1]|min }} {{ ['a', 'B']|max }}", "same"),
    ("{{ ['a', 'A', 'b']|unique|list }} {{ [1, 2, 1]|unique|list }} {{ 'hello'|unique|list }}", "same"),
    ("{{ 'a\nb'|indent }}|{{ 'a\n\nb\n'|indent(2, true, true) }}|{{ 'a\nb'|indent('> ') }}", "same"),
    ("{{ '  x  '|trim }}|{{ 'xxyxx'|trim('x') }}|{{ 'a b  c'|wordcount }}|{{ [1, 2]|join('-') }}", "same"),
    ("{{ d|items|list }} {{ d.get('k') }} {{ d.get('q', 5) }} {{ d['a'][0] }} {{ d.a[1] }}", "same"),
    ("{{ tools|tojson }} {{ tools[0].function.name }} {{ messages[2].tool_calls[0].function.arguments|tojson }}", "same"),
    ("{{ d|tojson(sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }} {{ 'é'|tojson(ensure_ascii=true) }}", "same"),
    ("{{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }} {{ [1, 2]|first }} {{ [1, 2]|last }} {{ []|first }}", "same"),
    ("{{ 'abc'|list }} {{ [1, 'a', none]|map('string')|list }} {{ ['a', 'b']|map('upper')|join }}", "same"),
    ("{{ -3|abs }} {{ -2.5|abs }} {{ 3|float }} {{ none|default('x') }} {{ ''|default('x', true) }}", "same"),
    ("{{ 5 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is string }} {{ z is none }}", "same"),
    ("{{ 1 is number }} {{ true is boolean }} {{ 1.0 is float }} {{ d is mapping }} {{ e is iterable }}", "same"),
    ("{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aB' is lower }} {{ '1' is upper }}", "same"),
    ("{{ 'é' is lower }}", "beyond ASCII"),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", "same"),
    ("{% for x in [1, 2, 3] if x > 1 %}{{ loop.index }}/{{ loop.length }}{% else %}none{% endfor %}", "same"),
    ("{% for x in e %}{{ x }}{% else %}empty{% endfor %}", "same"),
    ("{% set ns = namespace(t=0) %}{% for i in range(5) %}{% set ns.t = ns.t + i %}{% endfor %}{{ ns.t }}", "same"),
    ("{% macro m(a, b=2) %}{{ a }}+{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, b=3) }}", "same"),
    ("{%- for m in messages -%}\n  {{ m.role }}\n{%- endfor %}", "same"),
    ("{% if n > 2 %}big{% elif n > 1 %}mid{% else %}small{% endif %}", "same"),
    ("{{ raise_exception('no') }}", "no"),
]

# ---- the generator ---------------------------------------------------------------------------

INTS = [0, 1, 2, 3, -1, -2, 7, 10, 42, 100, 255, -17, 2 ** 31, 2 ** 53 + 1, -(2 ** 62), 10 ** 18]
FLOATS = [0.0, -0.0, 0.5, 1.5, 2.5, -2.5, 2.675, 0.125, 1e16, 1e-05, 123.456, -7.25, 1e300, 3.14159,
          0.1, 1e22, 5e-324, 2.0]
STRINGS = ["", "a", "abc", "Hello World", " x ", "a<b>&\"'", "É", "émile", "ΑΣ", "straße", "ǆ",
           "\x01", "\u0378", "😀", "\u00ad", "nan", "inf", "-Infinity", "1_000", "42", " 42 ", "4.5e1",
           "0x10", "-7", "٣", "a,b,,c", "line1\nline2\r\nl3", "  \t", "x y  z", "İ", "ß", "ﬁ",
           "{{ x }}", "%s", "1e400", "--", "a_b-c d", "\u2028", "HELLO", "hello world", "Abc Def"]
VARS = ["messages", "messages[0]", "messages[1].content", "messages[2]", "messages[2].content",
        "messages[2].tool_calls", "messages[-1].content", "tools", "tools[0].function", "n", "f", "s",
        "d", "d.a", "e", "z", "bos_token", "undefined_name", "add_generation_prompt", "documents"]
TESTS = ["defined", "undefined", "none", "boolean", "true", "false", "integer", "float", "number",
         "string", "mapping", "iterable", "sequence", "callable", "escaped", "odd", "even", "lower",
         "upper"]
TESTS_ARG = ["divisibleby", "eq", "ne", "lt", "le", "gt", "ge", "in", "sameas", "equalto", "==", "<"]
BINOPS = ["+", "-", "*", "/", "//", "%", "**", "~"]
CMPOPS = ["==", "!=", "<", "<=", ">", ">=", "in", "not in"]
STR_METHODS = [("strip", 0), ("lstrip", 0), ("rstrip", 0), ("strip", 1), ("split", 0), ("split", 1),
               ("split", 2), ("rsplit", 1), ("startswith", 1), ("endswith", 1), ("upper", 0),
               ("lower", 0), ("title", 0), ("capitalize", 0), ("replace", 2), ("replace", 3),
               ("find", 1), ("rfind", 1), ("count", 1), ("join", 1), ("splitlines", 0),
               ("removeprefix", 1), ("removesuffix", 1), ("isdigit", 0), ("isalpha", 0),
               ("isspace", 0), ("islower", 0), ("isupper", 0), ("isalnum", 0)]


class Gen:
    """Random templates: an expression printed, or a small statement around expressions."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    def pick(self, xs):
        return self.r.choice(xs)

    def literal(self):
        k = self.r.random()
        if k < 0.3:
            return repr(self.pick(INTS))
        if k < 0.5:
            x = self.pick(FLOATS)
            return repr(x) if x >= 0 or str(x) == "-0.0" else f"({x!r})"
        if k < 0.85:
            return json.dumps(self.pick(STRINGS), ensure_ascii=False)
        return self.pick(["none", "true", "false", "None", "True", "[]", "{}", "()"])

    def small(self):
        return str(self.r.randint(-3, 12))

    def binary(self, left, op, right):
        # A power's exponent stays small: Jinja2 folds constants at compile time, in C, where no
        # alarm stops 100 ** 2147483648.
        if op == "**":
            return f"({left} ** {self.pick(['0', '1', '2', '3', '-1', '0.5', '-2', 'n'])})"
        return f"({left} {op} {right()})"

    def subscript(self, base, index=False):
        if index:
            return f"{base}[{self.small()}]"
        a, b = self.pick(["", self.small()]), self.pick(["", self.small()])
        return f"{base}[{a}:{b}{self.pick(['', ':' + self.small(), ':-1', ':2'])}]"

    def args(self, name):
        r, p = self.r, self.pick
        table = {
            "round": lambda: p(["", f"({r.randint(-3, 4)})", f"({r.randint(0, 3)}, '{p(['common', 'floor', 'ceil'])}')"]),
            "center": lambda: f"({r.randint(0, 12)})",
            "indent": lambda: p(["", f"({r.randint(0, 4)})", f"({r.randint(0, 3)}, true)", "('> ', true, true)", "(2, blank=true)"]),
            "int": lambda: p(["", "(7)", "(default=-1)"]),
            "float": lambda: p(["", "(1.5)"]),
            "tojson": lambda: p(["", f"(indent={r.randint(-1, 3)})", "(sort_keys=true)", "(separators=(',', ':'))",
                                 "(ensure_ascii=true)"]),
            "join": lambda: p(["", "(',')", "(' | ')", "(attribute='role')"]),
            "map": lambda: p(["('upper')", "('string')", "('length')", "(attribute='role')", "(attribute='content')",
                              "(attribute='x', default='?')", "('int')", "('abs')", "('trim')", "('e')"]),
            "select": lambda: p(["", "('odd')", "('string')", "('none')", "('defined')", "('number')", "('eq', 1)",
                                 "('in', [1, 'a'])", "('lower')"]),
            "selectattr": lambda: p(["('role')", "('content')", "('role', 'eq', 'user')", "('content', 'none')",
                                     "('role', 'in', ['user', 'tool'])", "('x')"]),
            "dictsort": lambda: p(["", "(true)", "(by='value')", "(reverse=true)"]),
            "sort": lambda: p(["", "(reverse=true)", "(attribute='role')", "(case_sensitive=true)"]),
            "unique": lambda: p(["", "(attribute='role')", "(case_sensitive=true)"]),
            "min": lambda: p(["", "(attribute='role')"]),
            "sum": lambda: p(["", "(start=1)", "(attribute='n')"]),
            "default": lambda: p(["", "('dflt')", "('dflt', true)"]),
            "replace": lambda: p(["('a', 'b')", "('', '-')", "('l', 'L', 1)", "('<', '&')"]),
            "trim": lambda: p(["", "('x')", "('ab')"]),
            "truncate": lambda: p(["", "(5)"]),
            "batch": lambda: "(2)",
            "slice": lambda: "(2)",
            "wordwrap": lambda: "(5)",
            "format": lambda: "(1)",
            "attr": lambda: "('role')",
            "groupby": lambda: "('role')",
        }
        table["reject"] = table["select"]
        table["rejectattr"] = table["selectattr"]
        table["max"] = table["min"]
        return table.get(name, lambda: "")()

    FILTERS = ["abs", "capitalize", "center", "default", "dictsort", "escape", "e", "first", "float", "indent",
               "int", "items", "join", "last", "length", "count", "list", "lower", "map", "max", "min",
               "reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort",
               "string", "sum", "title", "tojson", "trim", "unique", "upper", "wordcount", "d",
               "truncate", "batch", "slice", "wordwrap", "format", "attr", "groupby", "striptags",
               "urlencode", "pprint", "xmlattr", "filesizeformat", "forceescape", "random"]

    def expr(self, depth=0):
        r = self.r.random()
        if depth > 3 or r < 0.2:
            return self.literal() if self.r.random() < 0.6 else self.pick(VARS)
        if r < 0.32:
            return self.binary(self.expr(depth + 1), self.pick(BINOPS), lambda: self.expr(depth + 1))
        if r < 0.38:
            return f"({self.expr(depth + 1)} {self.pick(CMPOPS)} {self.expr(depth + 1)})"
        if r < 0.58:
            f = self.pick(self.FILTERS)
            return f"({self.expr(depth + 1)} | {f}{self.args(f)})"
        if r < 0.64:
            if self.r.random() < 0.6:
                return f"({self.expr(depth + 1)} is {self.pick(['', 'not '])}{self.pick(TESTS)})"
            return f"({self.expr(depth + 1)} is {self.pick(TESTS_ARG)} {self.literal()})"
        if r < 0.74:
            m, n = self.pick(STR_METHODS)
            a = ", ".join(self.literal() if self.r.random() < 0.3 else json.dumps(self.pick(STRINGS), ensure_ascii=False)
                          for _ in range(n))
            if m == "join":
                a = self.pick(["['x', 'y']", "'abc'", "[1]", "messages|map(attribute='role')"])
            if m in ("split", "rsplit", "replace") and n >= 2 and self.r.random() < 0.5:
                a = a.rsplit(",", 1)[0] + f", {self.r.randint(-1, 2)}"
            return f"{self.pick(STRINGS + ['s', 'messages[1].content']) if self.r.random() < 0.5 else repr(self.pick(STRINGS))}.{m}({a})"
        if r < 0.78:
            return self.pick([f"d.get({self.literal()})", "d.keys()", "d.values()", "d.items()", "d.copy()",
                              f"[1, 2, 1].count({self.literal()})", f"(1, 2).index({self.small()})",
                              "messages[0].items()|list", "d.items()|list"])
        if r < 0.84:
            return self.subscript(self.expr(depth + 1), index=self.r.random() < 0.5)
        if r < 0.88:
            return f"({self.expr(depth + 1)} if {self.expr(depth + 1)} else {self.expr(depth + 1)})"
        if r < 0.91:
            return f"({self.pick(['not ', '-', '+'])}{self.expr(depth + 1)})"
        if r < 0.94:
            return f"({self.expr(depth + 1)} {self.pick(['and', 'or'])} {self.expr(depth + 1)})"
        if r < 0.97:
            items = ", ".join(self.expr(depth + 2) for _ in range(self.r.randint(0, 3)))
            return self.pick([f"[{items}]", f"({items},)" if items else "()"])
        return f"{{{self.literal()}: {self.expr(depth + 2)}, 'k': {self.literal()}}}"

    # Typed expressions: most draws are well-typed, so that most snippets render on both sides
    # and their texts are compared (the untyped ones above exercise the refusals).
    def typed(self, kind, depth=0):
        r, p = self.r, self.pick
        if depth > 3:
            return self.leaf(kind)
        k = r.random()
        if kind == "str":
            if k < 0.2:
                return self.leaf("str")
            if k < 0.3:
                return f"({self.typed('str', depth + 1)} ~ {self.typed(p(['num', 'str', 'list']), depth + 1)})"
            if k < 0.6:
                f = p(["upper", "lower", "capitalize", "title", "trim", "center", "indent", "replace", "e",
                       "safe", "string", "reverse", "default", "wordcount", "first", "last"])
                sub = self.typed("str", depth + 1)
                out = f"({sub} | {f}{self.args(f)})"
                return out if f not in ("wordcount",) else f"({out} ~ '')"
            if k < 0.7:
                return f"({self.typed('list', depth + 1)} | join({p(['', repr(', '), repr('|')])}))"
            if k < 0.75:
                return f"({self.typed(p(['list', 'dict', 'num', 'str']), depth + 1)} | tojson{self.args('tojson')})"
            if k < 0.88:
                m, n = p([x for x in STR_METHODS if x[0] not in ("startswith", "endswith", "find", "rfind", "count")
                          and not x[0].startswith("is") and x[0] not in ("split", "rsplit", "splitlines")])
                a = ", ".join(self.typed("str", depth + 2) for _ in range(n))
                if m == "join":
                    a = self.typed("list", depth + 1)
                return f"{self.typed('str', depth + 1)}.{m}({a})"
            if k < 0.94:
                return self.subscript(self.typed("str", depth + 1))
            return f"({self.typed('str', depth + 1)} if {self.typed('bool', depth + 1)} else {self.typed('str', depth + 1)})"
        if kind == "num":
            if k < 0.3:
                return self.leaf("num")
            if k < 0.55:
                return self.binary(self.typed("num", depth + 1), p(BINOPS[:-1]), lambda: self.typed("num", depth + 1))
            if k < 0.7:
                f = p(["abs", "int", "float", "round", "round", "round"])
                return f"({self.typed(p(['num', 'num', 'str']), depth + 1)} | {f}{self.args(f)})"
            if k < 0.85:
                return f"({self.typed(p(['list', 'str', 'dict']), depth + 1)} | {p(['length', 'count'])})"
            if k < 0.92:
                return f"({self.typed('numlist', depth + 1)} | {p(['sum', 'min', 'max', 'first', 'last'])})"
            return f"{self.typed('str', depth + 1)}.{p(['find', 'rfind', 'count'])}({self.typed('str', depth + 2)})"
        if kind == "numlist":
            return p(["[1, 2, 3]", "[3.5, -1, 2]", "range(5)|list", "[true, 2, 0.5]", "[7]",
                      f"[{self.typed('num', depth + 1)}, {self.typed('num', depth + 1)}]", "[-2, -7, 4]"])
        if kind == "list":
            if k < 0.25:
                return self.leaf("list")
            if k < 0.5:
                f = p(["select", "reject", "map", "selectattr", "rejectattr", "unique", "sort", "reverse",
                       "dictsort", "items", "list", "batch"])
                sub = self.typed("dict" if f in ("dictsort", "items") else "list", depth + 1)
                return f"({sub} | {f}{self.args(f)} | list)"
            if k < 0.6:
                return f"({self.typed('list', depth + 1)} + {self.typed('list', depth + 1)})"
            if k < 0.7:
                return f"{self.typed('str', depth + 1)}.{p(['split', 'splitlines', 'rsplit'])}({p(['', repr(','), repr(' ')])})"
            if k < 0.8:
                return self.subscript(self.typed("list", depth + 1))
            if k < 0.9:
                return f"[{', '.join(self.typed(p(['str', 'num', 'list', 'dict', 'any']), depth + 2) for _ in range(r.randint(0, 3)))}]"
            return f"({self.typed('dict', depth + 1)}.{p(['keys', 'values', 'items'])}() | list)"
        if kind == "dict":
            if k < 0.6:
                return self.leaf("dict")
            items = ", ".join(f"{json.dumps(p(STRINGS), ensure_ascii=False)}: {self.typed(p(['str', 'num', 'list', 'any']), depth + 2)}"
                              for _ in range(r.randint(0, 3)))
            return "{" + items + "}"
        if kind == "bool":
            if k < 0.35:
                a = p(["str", "num", "list"])
                return f"({self.typed(a, depth + 1)} {p(CMPOPS[:6])} {self.typed(a, depth + 1)})"
            if k < 0.5:
                return f"({self.typed('str', depth + 1)} {p(['in', 'not in'])} {self.typed(p(['str', 'list', 'dict']), depth + 1)})"
            if k < 0.8:
                t = p(TESTS + TESTS_ARG)
                arg = f" {self.typed(p(['num', 'str', 'list']), depth + 2)}" if t in TESTS_ARG else ""
                return f"({self.typed('any', depth + 1)} is {p(['', 'not '])}{t}{arg})"
            return f"({p(['not ', ''])}{self.typed(p(['str', 'num', 'list', 'bool']), depth + 1)} {p(['and', 'or'])} {self.typed('any', depth + 1)})"
        return self.typed(p(["str", "num", "list", "dict", "bool"]), depth)

    def leaf(self, kind):
        p = self.pick
        if kind == "str":
            return p([json.dumps(p(STRINGS), ensure_ascii=False)] * 3 + ["s", "bos_token", "messages[1].content",
                                                                     "messages[-1].content", "messages[0].role",
                                                                     "tools[0].function.description"])
        if kind == "num":
            return p([repr(p(INTS)), repr(p(FLOATS)), "n", "f", "messages|length", "d.a[0]"])
        if kind == "list":
            return p(["messages", "tools", "e", "d.a", "[1, 'a', none]", "['b', 'A', 'a', 'c']", "[3, 1, 2]",
                      "range(4)|list", "messages[2].tool_calls", "[[1, 2], [0]]", "(1, 'x')"])
        if kind == "dict":
            return p(["d", "messages[0]", "messages[2]", "tools[0]", "tools[0].function.parameters", "{}",
                      "messages[2].tool_calls[0].function.arguments"])
        return p(["true", "false", "none", "z", "undefined_name"])

    def template(self):
        k = self.r.random()
        e = self.expr() if self.r.random() < 0.3 else self.typed("any")
        if k < 0.6:
            return "{{ " + e + " }}"
        if k < 0.7:
            return "{% for x in " + e + " %}{{ x }},{{ loop.index }};{% else %}-{% endfor %}"
        if k < 0.8:
            return "{% if " + e + " %}T{% else %}F{% endif %}"
        if k < 0.9:
            return "{% set v = " + e + " %}{{ v }}|{{ v is string }}|{{ " + self.typed("any") + " }}"
        return "{% macro m(a, b=" + self.literal() + ") %}[{{ a }}:{{ b }}]{% endmacro %}{{ m(" + e + ") }}"


# Jinja2's optimizer folds constant expressions and writes the constant into the Python it
# compiles as repr() gives it: an inf or nan constant (('inf'|float) ** 2) then names a variable
# that does not exist. Such a snippet tells nothing about our engine.
JINJA2_OWN_BUGS = {"NameError: name 'inf' is not defined", "NameError: name 'nan' is not defined"}

# ---- rendering -------------------------------------------------------------------------------

def render_reference(template):
    warnings.filterwarnings("ignore")  # Python's own SyntaxWarnings about the generated code
    try:
        return {"text": _compile_jinja_template(template).render(**VARIABLES)}
    except (MemoryError, RecursionError, OverflowError) as e:
        if isinstance(e, OverflowError) and "Numerical result" in str(e):
            return {"error": f"{type(e).__name__}: {e}"}  # float ** past the range: a refusal
        return {"error": f"{type(e).__name__}", "resource": True}
    except Exception as e:  # noqa: BLE001 - any error of Jinja2's is a refusal of this snippet
        return {"error": f"{type(e).__name__}: {e}"}


def reference_worker(conn):
    # Jinja2 builds what a snippet asks for (a string of 10**9 bytes) in C: a bound on the
    # worker's memory makes that a MemoryError rather than minutes of paging.
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
    while True:
        conn.send(render_reference(conn.recv()))


class Reference:
    """Jinja2's side in a forked worker (transformers already imported), killed and forked again
    when a snippet runs past `timeout` seconds, which no alarm could stop inside C code."""

    def __init__(self, timeout=10):
        self.timeout = timeout
        self.start()

    def start(self):
        self.conn, child = multiprocessing.Pipe()
        self.proc = multiprocessing.get_context("fork").Process(target=reference_worker, args=(child,),
                                                                daemon=True)
        self.proc.start()

    def close(self):
        """Ends the worker. It was forked after Ours started chat_render, so it holds a copy of the
        write end of chat_render's stdin: until it is gone, chat_render never sees end of file and
        Ours.close() waited forever (the stall that kept this test out of CTest)."""
        self.proc.kill()
        self.proc.join()

    def __call__(self, template):
        self.conn.send(template)
        if self.conn.poll(self.timeout):
            return self.conn.recv()
        self.proc.kill()
        self.proc.join()
        self.start()
        return {"timeout": True}


class Ours:
    def __init__(self, render):
        self.proc = subprocess.Popen([render], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     encoding="utf-8", errors="surrogateescape")

    def __call__(self, template):
        req = {"template": template, "tokenizer": None, "variables": VARIABLES}
        self.proc.stdin.write(json.dumps(req, ensure_ascii=False) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"chat_render ended (exit {self.proc.wait()}) on {template!r}")
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def judge(template, want, ours, reference):
    """(the outcome's name, a failure or None, our refusal's message where only ours refused)."""
    got = ours(template)
    if want not in ("same", "either"):  # a refusal is asked for: Jinja2 may take minutes
        if "error" not in got or want not in got["error"]:
            return "not refused as asked", (f"ours must refuse naming {want!r}\n  {template!r}\n"
                                            f"  ours: {got.get('error') or got['text'][:200]!r}"), None
        return "refused by name as asked", None, None
    ref = reference(template)
    if "error" in ref and ref["error"] in JINJA2_OWN_BUGS:
        return "Jinja2's own bug (a folded inf or nan)", None, None
    if "timeout" in ref or ref.get("resource"):
        failure = f"Jinja2 could not render it ({ref})\n  {template!r}" if want == "same" else None
        return "Jinja2 ran out of time or memory", failure, None
    if "error" in got:
        msg = got["error"]
        failure = f"ours refused what Jinja2 renders\n  {template!r}\n  ours: {msg}" if want == "same" else None
        if "text" in ref:
            return "refused by ours only", failure, msg.split(": ", 1)[-1][:90]
        return "refused by both", failure, None
    if "error" in ref:
        return "ours renders, Jinja2 raises", (f"ours renders what Jinja2 refuses\n  {template!r}\n"
                                               f"  Jinja2: {ref['error'][:200]}\n  ours:   {got['text'][:200]!r}"), None
    if ref["text"] != got["text"]:
        return "differ", (f"the texts differ\n  {template!r}\n  Jinja2: {ref['text'][:300]!r}\n"
                          f"  ours:   {got['text'][:300]!r}"), None
    return "identical", None, None


def corpus_files(dirs):
    out = []
    for d in dirs:
        for name in sorted(os.listdir(d)):
            path = os.path.join(d, name)
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    raw = f.read()
                try:
                    out.append((f"{path}", raw.decode("utf-8")))
                except UnicodeDecodeError:
                    pass  # JSON cannot carry it to chat_render; the fuzz target itself reads bytes
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--render", required=True)
    ap.add_argument("--count", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=43)
    ap.add_argument("--corpus", action="append",
                    default=None, help="a directory of templates (default: the fuzz seed corpus)")
    ap.add_argument("--show", type=int, default=8, help="refusals to list (the commonest)")
    ap.add_argument("--verbose", action="store_true", help="each case's time on stderr")
    args = ap.parse_args()
    corpus = args.corpus or [os.path.join(here, "..", "fuzz", "corpus", "chat_template")]

    cases = [(f"fixed {k}", t, want) for k, (t, want) in enumerate(FIXED)]
    cases += [(path, t, "either") for path, t in corpus_files(corpus)]
    gen = Gen(args.seed)
    cases += [(f"generated {k} (seed {args.seed})", gen.template(), "either") for k in range(args.count)]

    ours, reference = Ours(args.render), Reference()
    failures, refusals = [], collections.Counter()
    tally, slowest = collections.Counter(), []
    for where, template, want in cases:
        start = time.monotonic()
        outcome, failure, refusal = judge(template, want, ours, reference)
        tally[outcome] += 1
        if refusal:
            refusals[refusal] += 1
        if failure:
            failures.append(f"{where}: {failure}")
        slowest = sorted(slowest + [(time.monotonic() - start, where)], reverse=True)[:3]
        if args.verbose:
            print(f"{time.monotonic() - start:7.2f} s {where}", file=sys.stderr, flush=True)
    reference.close()
    ours.close()
    print(f"{len(cases)} templates ({len(FIXED)} fixed, {len(cases) - len(FIXED) - args.count} from "
          f"{', '.join(corpus)}, {args.count} generated): "
          + ", ".join(f"{n} {k}" for k, n in sorted(tally.items())))
    for msg, n in refusals.most_common(args.show):
        print(f"  refused by ours only {n}x: {msg}")
    print("  slowest: " + ", ".join(f"{w} {t:.1f} s" for t, w in slowest))
    if failures:
        print(f"\n{len(failures)} FAILED:")
        for f in failures:
            print(f)
        sys.exit(1)


if __name__ == "__main__":
    main()
