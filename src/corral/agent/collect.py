"""Find the artifact files a plan's ``artifacts.paths`` globs name inside the workdir.

Glob rules (matched against workdir-relative POSIX paths):

* ``*`` matches within one path segment, ``?`` one character, ``[abc]`` / ``[!abc]`` a class;
  ``**`` as a whole segment matches zero or more segments (``outputs/**``, ``**/*.pt``).
* A pattern that names a directory takes every file under it (``outputs`` = ``outputs/**``).
* Symbolic links are never followed out of the workdir: a link to a file inside the workdir is
  collected (its content), a link pointing outside is skipped with a warning, a linked
  directory is not descended into (its files are reached through their real path, if a pattern
  names it).
* A pattern that is absolute or climbs out of the workdir (``..``) is skipped with a warning,
  and so is one that matched nothing.
* Files under ``exclude`` (the agent's own state directory) are never collected.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

_WILD = re.compile(r"[*?\[]")


@dataclass
class Collected:
    #: workdir-relative POSIX path -> the real file to read
    files: dict[str, Path] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _segment_regex(segment: str) -> str:
    out, i = [], 0
    while i < len(segment):
        ch = segment[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = segment.find("]", i + 2 if segment[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end < 0:
                out.append(re.escape(ch))
            else:
                body = segment[i + 1 : end]
                negate = body.startswith("!")
                body = body[1:] if negate else body
                body = body.replace("\\", "\\\\").replace("/", "")
                out.append(f"[{'^' if negate else ''}{body}]" if body else "(?!)")
                i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def pattern_regex(segments: list[str]) -> re.Pattern[str]:
    """The regex of a glob split into segments; a match also takes everything below it."""
    out = []
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg == "**":
            out.append("(?:[^/]+(?:/[^/]+)*)?" if last else "(?:[^/]+/)*")
        else:
            out.append(_segment_regex(seg) + ("" if last else "/"))
    return re.compile("^" + "".join(out) + "(?:/.*)?$", re.DOTALL)


def _split(pattern: str) -> list[str] | None:
    """Segments of a relative pattern, or None when it is absolute or leaves the workdir."""
    if pattern.startswith(("/", "~")):
        return None
    segments = [s for s in pattern.split("/") if s not in ("", ".")]
    if not segments or ".." in segments:
        return None
    return segments


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def collect(
    workdir: str | Path, patterns: list[str], exclude: Sequence[str | Path] = ()
) -> Collected:
    """Every file inside ``workdir`` that one of ``patterns`` names (see the module doc)."""
    result = Collected()
    work = os.path.realpath(workdir)
    excluded = [os.path.realpath(p) for p in exclude]
    if not os.path.isdir(work):
        if patterns:
            result.warnings.append(f"workdir {workdir} does not exist: no artifacts collected")
        return result
    for pattern in patterns:
        segments = _split(pattern)
        if segments is None:
            result.warnings.append(f"artifact pattern {pattern!r} is not inside the workdir")
            continue
        found = _match(work, segments, excluded, result)
        if not found:
            result.warnings.append(f"artifact pattern {pattern!r} matched no file")
    return result


def _match(work: str, segments: list[str], excluded: list[str], result: Collected) -> int:
    regex = pattern_regex(segments)
    literal: list[str] = []
    for seg in segments:
        if _WILD.search(seg) or seg == "**":
            break
        literal.append(seg)
    start = os.path.join(work, *literal)
    found = 0
    if not os.path.lexists(start):
        return 0
    if not os.path.isdir(start) or os.path.islink(start):
        rel = "/".join(literal)
        return int(bool(rel) and _take(work, rel, excluded, result, regex))
    for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
        dirnames[:] = sorted(
            d for d in dirnames if os.path.realpath(os.path.join(dirpath, d)) not in excluded
        )
        reldir = os.path.relpath(dirpath, work).replace(os.sep, "/")
        reldir = "" if reldir == "." else reldir + "/"
        for name in sorted(filenames) + [d for d in dirnames if _is_link(dirpath, d)]:
            found += _take(work, reldir + name, excluded, result, regex)
    return found


def _is_link(dirpath: str, name: str) -> bool:
    return os.path.islink(os.path.join(dirpath, name))


def _take(
    work: str, rel: str, excluded: list[str], result: Collected, regex: re.Pattern[str]
) -> bool:
    """Collect ``rel`` if the pattern matches it and it is a regular file inside the workdir."""
    if not regex.match(rel):
        return False
    path = os.path.join(work, *rel.split("/"))
    real = os.path.realpath(path)
    if any(_inside(real, ex) for ex in excluded):
        return False
    if not _inside(real, work):
        result.warnings.append(f"skipped {rel}: a symlink pointing outside the workdir")
        return False
    if not os.path.isfile(real):
        return False  # a linked directory (not descended into), a socket, a dangling link
    result.files.setdefault(rel, Path(real))
    return True
