"""Recipes: flag files shipped inside the package (``estimator/recipes/NAME.args``; ``recipes/`` in a
checkout is the same folder), named with ``--recipe NAME`` on every command that takes trainer flags.

``--recipe NAME`` (or a path) stands for the recipe's flags at that place in the command line, so later
flags override them, as with ``@FILE``; the trainer records the recipe in hparams.json. A job on Vertex
AI gets the name, which its container's package resolves: no file has to travel with the job.
"""

from __future__ import annotations

import os
import shlex

FLAG = "--recipe"
DIRECTORY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes")
SUFFIX = ".args"


def names() -> list:
    """The recipes shipped with the package."""
    return sorted(f[: -len(SUFFIX)] for f in os.listdir(DIRECTORY) if f.endswith(SUFFIX))


def path_of(value: str) -> str:
    """The file of recipe ``value``: a shipped one's name, or a path.

    Raises:
      ValueError: naming the value and the recipes there are.
    """
    if os.path.isfile(value):
        return value
    shipped = os.path.join(DIRECTORY, value + SUFFIX)
    if os.path.isfile(shipped):
        return shipped
    raise ValueError("--recipe %s is neither a recipe of this package (%s) nor a file." % (value, ", ".join(names())))


def read(value: str) -> list:
    """The flags of recipe ``value``, as a command line (comments dropped)."""
    with open(path_of(value)) as f:
        return shlex.split(f.read(), comments=True)


def find(argv) -> tuple:
    """``(index, value)`` of the ``--recipe`` in ``argv`` (``--recipe X`` or ``--recipe=X``), or
    ``(None, None)``.

    Raises:
      ValueError: two recipes, or ``--recipe`` without a value.
    """
    found = [i for i, a in enumerate(argv) if a == FLAG or a.startswith(FLAG + "=")]
    if len(found) > 1:
        raise ValueError("%s is given %d times: give one recipe, and flags after it." % (FLAG, len(found)))
    if not found:
        return None, None
    i = found[0]
    if argv[i] == FLAG:
        if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
            raise ValueError("%s needs a name (%s) or a path." % (FLAG, ", ".join(names())))
        return i, argv[i + 1]
    return i, argv[i].split("=", 1)[1]


def expand(argv) -> list:
    """``argv`` with the recipe's flags in place of ``--recipe X`` (kept first, so that the trainer records
    it), and later flags after them, so they win. Without ``--recipe``: ``argv`` unchanged."""
    argv = list(argv)
    i, value = find(argv)
    if i is None:
        return argv
    width = 2 if argv[i] == FLAG else 1
    return argv[:i] + [FLAG + "=" + value] + read(value) + argv[i + width :]
