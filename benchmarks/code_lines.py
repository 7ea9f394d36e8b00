"""The product's size in code lines: docstrings, comments and blank lines apart (an ``ast``/``tokenize`` count).

    python -m benchmarks.code_lines                      # estimator/ and generate_cifar10_tfrecords.py, by package
    python -m benchmarks.code_lines estimator/budget     # one folder

A line counts once when it holds a token of code; a docstring's lines (module, class, function) and comment
lines do not. Prints a table, largest first, and writes JSON.
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import sys
import tokenize

from benchmarks.common import write_result

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRODUCT = ("estimator", "generate_cifar10_tfrecords.py")
SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def count(source: str) -> tuple:
    """``(code lines, docstring lines)`` of one module's ``source``."""
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    docstrings.update(range(first.lineno, first.end_lineno + 1))
    code = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in SKIPPED:
            code.update(line for line in range(token.start[0], token.end[0] + 1) if line not in docstrings)
    return len(code), len(docstrings)


def python_files(paths) -> list:
    found = []
    for path in paths:
        if path.endswith(".py"):
            found.append(path)
            continue
        for root, _, files in os.walk(path):
            found += [os.path.join(root, name) for name in files if name.endswith(".py")]
    return sorted(found)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", default=[os.path.join(REPO, p) for p in PRODUCT])
    parser.add_argument("--out", default=None, help="Write the counts as JSON here too.")
    args = parser.parse_args(argv)
    rows = []
    for path in python_files(args.paths):
        with open(path) as f:
            code, docs = count(f.read())
        rows.append({"path": os.path.relpath(path, REPO), "code_lines": code, "docstring_lines": docs})
    packages = {}
    for row in rows:
        key = os.path.dirname(row["path"]) or row["path"]
        packages[key] = packages.get(key, 0) + row["code_lines"]
    print("%8s  %s" % ("code", "package"))
    for key, lines in sorted(packages.items(), key=lambda kv: -kv[1]):
        print("%8d  %s" % (lines, key))
    total = sum(r["code_lines"] for r in rows)
    print(
        "%8d  in all (%d files; %d docstring lines beside)"
        % (total, len(rows), sum(r["docstring_lines"] for r in rows))
    )
    if args.out:
        write_result(args.out, {"code_lines": total, "packages": packages, "files": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
