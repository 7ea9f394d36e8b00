"""The README stays a five-minute read, and every link in it and in docs/ resolves."""

import contextlib
import glob
import io
import os
import re
import shlex

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
    """README and docs/ together stay a read (at most 1,200 lines): the history of every run lives in git,
    the docs keep one table per question. The flag table is ``--help``'s, made from the declarations: a
    reference to look things up in, not a read, so its rows are not counted."""
    lines = 0
    for path in DOCS:
        with open(path) as f:
            text = f.read()
        head, _, rest = text.partition(flags.TABLE_START)
        lines += len((head + rest.partition(flags.TABLE_END)[2]).splitlines())
    assert lines <= 1200, lines


def _paragraphs(text):
    """The prose paragraphs and list items of a Markdown text: tables, code, headings and the flag table left out."""
    head, _, rest = text.partition(flags.TABLE_START)
    text = head + rest.partition(flags.TABLE_END)[2]
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for block in re.split(r"\n\s*\n", text):
        if block.strip() and not block.lstrip().startswith(("|", "#", "<!--")):
            yield from re.split(r"\n(?=\s*(?:[-*]|\d+\.) )", block)


def test_no_prose_paragraph_runs_past_150_words():
    """Docs that read as a manual: a paragraph that lists runs is a table waiting to happen."""
    assert len(list(_paragraphs("one two\n\n* three\n* four\n\n| a | b |\n\n```\nx\n```"))) == 3
    long = [
        "%s: %d words: %s" % (os.path.relpath(path, REPO), len(p.split()), p[:60])
        for path in DOCS
        for p in _paragraphs(open(path).read())
        if len(p.split()) > 150
    ]
    assert long == []


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


def documented_commands():
    """``(program, words)`` of every command of README.md's and docs/'s code blocks that runs a program of this
    repository, continuation lines joined; a comment, a redirection and ``...`` dropped, ``[optional]`` groups
    dropped too (each is a flag of its own, its value a placeholder)."""
    commands = []
    for path in DOCS:
        with open(path) as f:
            text = f.read()
        for block in re.findall(r"```sh\n(.*?)```", text, re.S):
            for line in block.replace("\\\n", " ").splitlines():
                if not line.startswith("python "):
                    continue
                line = re.sub(r"\[[^]]*\]", " ", line.split("  #")[0].split(" > ")[0])
                words = shlex.split(line.replace("$BUCKET", "bucket").replace("...", " "))
                if words[:2] == ["python", "-m"]:
                    commands.append((words[2], words[3:]))
                elif words[:1] == ["python"] and words[1].endswith(".py"):
                    commands.append((words[1], words[2:]))
    return commands


def parsers():
    """Each program's own parser of its own flags; the trainer's flags after ``--`` go to the trainer's."""
    from benchmarks import recipes
    from estimator import export, predict, preflight, tune
    from estimator.data import convert

    return {
        "generate_cifar10_tfrecords.py": convert.build_parser,
        "estimator.cifar10_main": flags.build_parser,
        "estimator.preflight": preflight.build_parser,
        "estimator.export": export.build_parser,
        "estimator.predict": predict.build_parser,
        "estimator.tune": tune.build_parser,
        "benchmarks.recipes": recipes.build_parser,
        "estimator.vertex": None,  # tests/test_vertex.py writes and checks every job of its commands
    }


def refusals(program, words, flag_file=None):
    """The error lines the program's parser (and the trainer's, for the flags after ``--``) prints of ``words``:
    [] when it takes them. A flag file of the docs (``@flags.txt``, ``@J/best.args``) is the user's, or one a
    command before it writes: ``flag_file`` stands for it."""
    words = ["@" + flag_file if w.startswith("@") else w for w in words]
    own, trainer = (words[: words.index("--")], words[words.index("--") + 1 :]) if "--" in words else (words, [])
    said = []
    for build, part in [(parsers()[program], own)] + ([(flags.build_parser, trainer)] if trainer else []):
        printed = io.StringIO()
        try:
            with contextlib.redirect_stderr(printed):
                build().parse_args(part)
        except SystemExit:
            said += [line.partition(": error: ")[2] for line in printed.getvalue().splitlines() if ": error: " in line]
    return said


def test_every_documented_command_runs_a_program_that_takes_its_flags(tmp_path):
    """A flag renamed or retired, or a program moved, would leave a command in the docs that stops at its
    first line: every command of the docs is parsed by its program's own parser."""
    flag_file = tmp_path / "flags.txt"
    flag_file.write_text("--data-dir D --job-dir J  # the least a trainer's flag file holds\n")
    commands = documented_commands()
    programs = {program for program, _ in commands}
    assert programs == set(parsers()), programs ^ set(parsers())
    assert len(commands) >= 30
    for program, words in commands:
        if parsers()[program] is not None:
            assert refusals(program, words, str(flag_file)) == [], (program, words)
    # The check can fail: a retired flag, a trainer flag misspelt after --, a value of the wrong type, flags that
    # exclude each other, a flag file without what the trainer requires.
    said = refusals("estimator.cifar10_main", ["--data-dir", "D", "--ensemble", "2"])
    assert said == [
        "--ensemble was retired in 0.3.0 (two networks of half the epochs each tied one network at 30 minutes; "
        "docs/experiments.md): drop it."
    ]
    said = refusals("estimator.tune", ["--config", "c.yaml", "--job-dir", "J", "--", "--data-dir", "D", "--lr", "1"])
    assert said == ["ambiguous option: --lr could match --lr-schedule, --lr-decay-steps, --lr-scaling"]
    said = refusals("estimator.predict", ["--model", "M", "--top-k", "three", "cat.png"])
    assert said == ["argument --top-k: invalid int value: 'three'"]
    said = refusals("generate_cifar10_tfrecords.py", ["--data-dir", "D", "--md5", "A", "--sha256", "B"])
    assert said == ["argument --sha256: not allowed with argument --md5"]
    flag_file.write_text("--learning-rate 0.05\n")
    said = refusals("estimator.cifar10_main", ["@flags.txt", "--momentum", "0.8"], str(flag_file))
    assert said == ["the following arguments are required: --data-dir"]
