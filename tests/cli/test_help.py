"""Help texts are wrapped by the terminal, never by line breaks in the docstrings."""

from __future__ import annotations

import subprocess
import sys
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


def _every_command_path() -> list[list[str]]:
    return [path.split()[1:] for path, _ in _commands(typer.main.get_command(app))]


def test_the_app_run_for_a_command_holds_that_command_only() -> None:
    from corral.cli.app import app_for

    narrow = typer.main.get_command(app_for(["--debug", "launch", "job.yaml", "--detach"]))
    assert isinstance(narrow, click.Group)
    assert list(narrow.commands) == ["launch"]
    # no command, or one that does not exist: the whole app (help lists every command, and
    # the error for a typo suggests the nearest name)
    assert app_for([]) is app
    assert app_for(["--help"]) is app
    assert app_for(["lauch"]) is app


def test_running_one_command_imports_no_other_commands_module() -> None:
    code = (
        "import sys; from corral.cli.app import app_for; app_for(['ls', '--json']); "
        "print(sorted(m for m in sys.modules if m.startswith('corral.cli.') "
        "and m.rsplit('.', 1)[1] in {'launch', 'server', 'worker', 'pool', 'secret'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_help_is_the_same_from_the_narrow_app_for_every_command() -> None:
    from corral.cli.app import app_for

    runner = CliRunner()
    paths = _every_command_path()
    assert len(paths) > 20  # every command and subcommand of corral
    for path in paths:
        args = [*path, "--help"]
        full = runner.invoke(app, args, env={"COLUMNS": "120"})
        narrow = runner.invoke(app_for(args), args, env={"COLUMNS": "120"})
        assert (narrow.exit_code, narrow.output) == (full.exit_code, full.output), path


def test_a_mistyped_command_is_suggested_once() -> None:
    from corral.cli.app import app_for

    result = CliRunner().invoke(app_for(["lauch"]), ["lauch", "x"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "No such command 'lauch'" in result.output
    assert result.output.count("Did you mean") == 1
