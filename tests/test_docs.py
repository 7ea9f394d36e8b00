"""The README stays a five-minute read, and every link in it and in docs/ resolves."""

import glob
import os
import re

from estimator.training import flags
from tests.helpers import REPO

DOCS = [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))


def anchors(path):
    """GitHub's anchors of a Markdown file's headings."""
    with open(path) as f:
        headings = [line.lstrip("#").strip() for line in f if line.startswith("#")]
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_readme_is_short_and_links_the_docs():
    with open(DOCS[0]) as f:
        text = f.read()
    assert len(text.splitlines()) <= 120
    for name in ("training", "health", "serving", "cloud", "faults", "speed", "layout"):
        assert "(docs/%s.md)" % name in text


def test_every_link_resolves():
    broken = []
    for path in DOCS:
        with open(path) as f:
            for link in re.findall(r"\]\(([^)\s]+)\)", f.read()):
                if link.startswith(("http://", "https://")):
                    continue
                target, _, anchor = link.partition("#")
                target = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
                if not os.path.exists(target) or (anchor and anchor not in anchors(target)):
                    broken.append("%s: %s" % (os.path.relpath(path, REPO), link))
    assert broken == []


def test_the_docs_serve_users_not_the_laboratory():
    """README and docs/ together stay a read (at most 1,400 lines): the history of every run lives in git,
    the docs keep one table per question. The flag table is ``--help``'s, made from the declarations: a
    reference to look things up in, not a read, so its rows are not counted."""
    lines = 0
    for path in DOCS:
        with open(path) as f:
            text = f.read()
        head, _, rest = text.partition(flags.TABLE_START)
        lines += len((head + rest.partition(flags.TABLE_END)[2]).splitlines())
    assert lines <= 1400, lines


def test_the_flag_table_is_the_one_the_declarations_make():
    """docs/training.md's flag table is ``flags.markdown_table()`` (``make docs`` writes it): a flag's help,
    default and range are declared once, on its ``HParams`` field."""
    path = os.path.join(REPO, "docs", "training.md")
    with open(path) as f:
        text = f.read()
    assert flags.with_table(text) == text, "docs/training.md's flag table is stale: run make docs"
    table = flags.markdown_table()
    assert "| `--momentum X` | 0.9 | Momentum of SGD. Values: in [0, 1). |" in table.splitlines()
    assert "| `--precision fp32\\|bf16\\|fp16\\|auto` | fp32 |" in table
    assert "| `--data-dir DIR` | required |" in table
    for retired in ("--ema-decay", "--zero-init-residual", "--ensemble"):
        assert retired not in table
    parser = flags.build_parser()
    listed = set(re.findall(r"^\| `(--[a-z0-9-]+)", table, re.M))
    assert listed == {a.option_strings[0] for a in parser._actions if a.help != "==SUPPRESS==" and a.dest != "help"}
