#!/usr/bin/env python3
"""Functions of src/, bench/, topology/ and alloc/ stay within 120 lines (the house style).

Counts each top-level function body of every .cc file from its opening brace's line to its
closing brace's, lambdas and tables inside it included: a long table is cut into named pieces
(config.cc's AddModelKeys ...), a long lambda becomes a named function. Braces inside string and
character literals and comments are skipped. Exits 1 naming every function over the limit.
Usage: function_length.py REPO_ROOT [LIMIT]
"""
import pathlib
import re
import sys

OPENS_SCOPE = re.compile(r'\s*(namespace\b|extern "C"|(struct|class|enum|union)\b)')


def code_of(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return line.split("//")[0]


def long_functions(path, limit):
    stack = []  # (kind, first line): kind is "scope" (namespace, type) or "fn" or "inner"
    in_comment = False
    for i, raw in enumerate(path.read_text(errors="replace").split("\n")):
        line = raw
        if in_comment:
            if "*/" not in line:
                continue
            line, in_comment = line.split("*/", 1)[1], False
        line = re.sub(r"/\*.*?\*/", "", line)
        if "/*" in line:
            line, in_comment = line.split("/*", 1)[0], True
        for ch in code_of(line):
            if ch == "{":
                if all(kind == "scope" for kind, _ in stack):
                    kind = "scope" if OPENS_SCOPE.match(raw) else "fn"
                else:
                    kind = "inner"
                stack.append((kind, i))
            elif ch == "}" and stack:
                kind, first = stack.pop()
                if kind == "fn" and i - first + 1 > limit:
                    yield first + 1, i - first + 1


def main():
    root = pathlib.Path(sys.argv[1])
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 120
    bad = []
    for top in ("src", "bench", "topology", "alloc"):
        for path in sorted((root / top).rglob("*.cc")):
            for line, n in long_functions(path, limit):
                bad.append(f"{path.relative_to(root)}:{line}: a function of {n} lines")
    for b in bad:
        print(b)
    if bad:
        print(f"{len(bad)} function(s) over {limit} lines: cut each into named pieces "
              "(the house style: functions <= 120 lines; README.md, Tests)")
        return 1
    print(f"every function within {limit} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
