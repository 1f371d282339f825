"""``.gitignore`` rules, and the walk of a workdir that applies them (plus ``.corralignore``).

The rules are git's (``gitignore(5)``): ``#`` comments, ``!`` re-includes, a trailing ``/``
matches directories only, a pattern with a ``/`` elsewhere is anchored to its file's directory
(otherwise it matches a name at any depth), ``*`` and ``?`` stop at ``/``, ``**`` spans
directories, ``[...]`` classes, ``\\`` escapes. Rules of a deeper file win over a parent's, later
rules over earlier ones, and nothing under an ignored directory is looked at (as in git, a file
there cannot be re-included). In each directory ``.corralignore`` is read after ``.gitignore``,
so it can ignore more, or ship (``!pattern``) what git ignores. ``.git`` is never shipped.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass

IGNORE_FILES = (".gitignore", ".corralignore")
ALWAYS_IGNORED = frozenset({".git"})


@dataclass(frozen=True)
class Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    #: the rule's text, for messages
    text: str


def _segment(seg: str) -> str:
    """One path segment of a pattern as a regex (``*``, ``?``, classes, escapes)."""
    out: list[str] = []
    i, n = 0, len(seg)
    while i < n:
        c = seg[i]
        if c == "\\" and i + 1 < n:
            out.append(re.escape(seg[i + 1]))
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1
            if j < n and seg[j] in "!^":
                j += 1
            if j < n and seg[j] == "]":
                j += 1
            while j < n and seg[j] != "]":
                j += 1
            if j >= n:  # no closing bracket: a literal '['
                out.append(re.escape(c))
            else:
                body = seg[i + 1 : j]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def parse_rule(line: str) -> Rule | None:
    """One line of an ignore file as a rule; None for blanks and comments."""
    text = line.rstrip("\n").rstrip("\r")
    # trailing spaces are dropped unless escaped
    stripped = text.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(text):
        stripped += " "
    text = stripped
    if not text or text.startswith("#"):
        return None
    negate = text.startswith("!")
    if negate or text.startswith("\\!") or text.startswith("\\#"):
        text = text[1:]
    dir_only = text.endswith("/")
    body = text.rstrip("/")
    if not body:
        return None
    anchored = "/" in body
    body = body.lstrip("/")
    parts = body.split("/")
    pieces: list[str] = []
    for index, seg in enumerate(parts):
        last = index == len(parts) - 1
        if seg == "**":
            pieces.append(".*" if last else "(?:.*/)?")
        else:
            pieces.append(_segment(seg) + ("" if last else "/"))
    rx = "".join(pieces)
    rx = ("^" if anchored else "^(?:.*/)?") + rx + "$"
    return Rule(re.compile(rx, re.DOTALL), negate, dir_only, line.strip())


def read_rules(path: str) -> list[Rule]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return []
    return [r for r in (parse_rule(line) for line in lines) if r is not None]


@dataclass(frozen=True)
class Entry:
    """One path to ship: relative (``/``-separated), with what ``lstat`` said of it."""

    rel: str
    path: str
    st: os.stat_result

    @property
    def is_link(self) -> bool:
        return stat.S_ISLNK(self.st.st_mode)


def _ignored(levels: list[tuple[str, list[Rule]]], rel: str, is_dir: bool) -> bool:
    """Whether ``rel`` is ignored by the rules of its directory and every parent (a deeper
    file's rules win; the last matching rule of a file wins)."""
    verdict = False
    for base, rules in levels:
        sub = rel[len(base) + 1 :] if base else rel
        for rule in rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.match(sub):
                verdict = not rule.negate
    return verdict


#: ``never(rel, path, is_dir)``: True for an entry that is never shipped, whatever the ignore
#: files say (corral's own home, a secret store); it is not descended into
Never = Callable[[str, str, bool], bool]


def walk(root: str, never: Never | None = None) -> Iterator[Entry]:
    """Every file and symbolic link under ``root`` that is not ignored, sorted by path
    (directories are not listed: they come from their files; empty ones are not shipped).
    Sockets, fifos and devices are skipped, and so is every entry ``never`` refuses."""
    yield from _walk(os.path.abspath(root), "", [], never)


def _walk(
    top: str, rel: str, levels: list[tuple[str, list[Rule]]], never: Never | None = None
) -> Iterator[Entry]:
    here: list[Rule] = []
    for name in IGNORE_FILES:
        here += read_rules(os.path.join(top, name))
    if here:
        levels = [*levels, (rel, here)]
    try:
        with os.scandir(top) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name in ALWAYS_IGNORED:
            continue
        child = f"{rel}/{entry.name}" if rel else entry.name
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        is_dir = stat.S_ISDIR(st.st_mode)
        if levels and _ignored(levels, child, is_dir):
            continue
        if never is not None and never(child, entry.path, is_dir):
            continue
        if is_dir:
            yield from _walk(entry.path, child, levels, never)
        elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            yield Entry(child, entry.path, st)
