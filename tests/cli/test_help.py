"""Help texts are wrapped by the terminal, never by line breaks in the docstrings."""

from __future__ import annotations

from collections.abc import Iterator

import click
import typer
from typer.testing import CliRunner

from corral.cli.app import app
from corral.cli.helptext import unwrap


def _commands(command: click.Command, path: str = "corral") -> Iterator[tuple[str, click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, f"{path} {name}")


def test_no_command_help_has_a_line_break_inside_a_paragraph() -> None:
    broken = [
        path
        for path, command in _commands(typer.main.get_command(app))
        for para in (command.help or "").split("\n\n")
        if "\n" in para
    ]
    assert broken == []


def test_a_wide_terminal_shows_each_sentence_on_one_line() -> None:
    out = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "300"}).stdout
    assert "line until the run ends; Ctrl-C detaches (the run goes on)." in out
    out = CliRunner().invoke(app, ["validate", "--help"], env={"COLUMNS": "300"}).stdout
    assert "Problems are reported one per line as FILE:LINE: FIELD: MESSAGE (exit code 2)." in out


def test_unwrap_keeps_paragraphs_and_indented_blocks() -> None:
    text = "One\nsentence.\n\nTwo\nsentences.\n\nExample:\n    corral ls\n    corral status\n"
    assert (
        unwrap(text)
        == "One sentence.\n\nTwo sentences.\n\nExample:\n    corral ls\n    corral status"
    )
    assert unwrap("\bkeep\nthis") == "\bkeep\nthis"
