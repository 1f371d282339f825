"""Help texts the terminal wraps: docstrings are written with line breaks at 100 columns,
which a narrower or wider terminal would show mid-sentence. Each paragraph becomes one line
(click's ``\\b`` marker and indented blocks keep their breaks)."""

from __future__ import annotations

import re

import click

_BREAK = re.compile(r"[ \t]*\n[ \t]*")


def unwrap(text: str | None) -> str | None:
    """``text`` with the line breaks inside each paragraph (blank-line separated) replaced
    by spaces; a paragraph that starts with ``\\b`` or holds an indented line is kept."""
    if not text:
        return text
    paragraphs = re.split(r"\n[ \t]*\n", text.strip("\n"))
    out = []
    for para in paragraphs:
        lines = para.split("\n")
        if para.startswith("\b") or any(line[:1] in (" ", "\t") for line in lines[1:]):
            out.append(para)
        else:
            out.append(_BREAK.sub(" ", para.strip()))
    return "\n\n".join(out)


def unwrap_command(command: click.Command) -> None:
    """Unwrap ``command``'s help and short help in place."""
    command.help = unwrap(command.help)
    command.short_help = unwrap(command.short_help)
