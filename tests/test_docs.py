"""The README stays a five-minute read, and every link in it and in docs/ resolves."""

import glob
import os
import re

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
    the docs keep one table per question."""
    lines = 0
    for path in DOCS:
        with open(path) as f:
            lines += len(f.read().splitlines())
    assert lines <= 1400, lines
