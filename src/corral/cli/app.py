"""The ``corral`` command. One command per module; heavy imports happen inside commands so
that start-up stays fast."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer

from corral import __version__
from corral.cli.errors import DEBUG, CorralGroup

_SETTINGS: dict[str, Any] = {
    "cls": CorralGroup,
    "name": "corral",
    "help": "Launch GPU training runs and babysit them to the end.",
    "no_args_is_help": True,
    "add_completion": False,
    "pretty_exceptions_enable": False,
    "context_settings": {"help_option_names": ["-h", "--help"]},
}

#: every command in the order ``corral --help`` lists them: (name, module under
#: ``corral.cli``, its attribute, whether it is a group of subcommands)
COMMANDS: tuple[tuple[str, str, str, bool], ...] = (
    ("launch", "launch", "launch", False),
    ("status", "status", "status", False),
    ("ls", "ls", "ls", False),
    ("logs", "logs", "logs", False),
    ("cancel", "cancel", "cancel", False),
    ("stop", "stop", "stop", False),
    ("gpus", "gpus", "gpus", False),
    ("offers", "offers", "offers", False),
    ("estimate", "estimate", "estimate", False),
    ("budget", "budget", "app", True),
    ("exec", "execute", "exec_", False),
    ("download", "download", "download", False),
    ("controller", "controller", "app", True),
    ("validate", "validate", "validate", False),
    ("webhook", "webhook", "app", True),
    ("debug", "debug", "app", True),
    ("secret", "secret", "app", True),
    ("preflight", "preflight", "preflight", False),
    ("server", "server", "server", False),
    ("token", "token", "app", True),
    ("worker", "worker", "worker", False),
    ("schedule", "schedule", "app", True),
    ("sweep", "sweep", "app", True),
    ("pool", "pool", "app", True),
    ("volume", "volume", "app", True),
    ("agent", "agent", "agent", False),
)
_BY_NAME = {entry[0]: entry for entry in COMMANDS}
#: ``corral agent`` passes its arguments on to the agent
_PASS_THROUGH = {"ignore_unknown_options": True, "allow_extra_args": True}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"corral {__version__}")
        raise typer.Exit()


def _main(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks of errors."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    DEBUG["on"] = debug


def _new_app(*entries: tuple[str, str, str, bool]) -> typer.Typer:
    """An app holding ``entries``: each command's module is imported here, and only its."""
    built = typer.Typer(**_SETTINGS)
    built.callback()(_main)
    for name, module, attr, group in entries:
        target = getattr(importlib.import_module(f"corral.cli.{module}"), attr)
        if group:
            built.add_typer(target, name=name)
        elif name == "agent":
            built.command(name, context_settings=_PASS_THROUGH)(target)
        else:
            built.command(name)(target)
    return built


_full: typer.Typer | None = None


def full_app() -> typer.Typer:
    """The app with every command (built once)."""
    global _full
    if _full is None:
        _full = _new_app(*COMMANDS)
    return _full


def __getattr__(name: str) -> typer.Typer:
    """``corral.cli.app.app``: the app with every command (for tests and embedders; the
    ``corral`` command itself builds only the one it runs, see :func:`app_for`)."""
    if name == "app":
        return full_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _command_name(argv: list[str]) -> str | None:
    """The command ``argv`` (without the program name) invokes: its first word that is not
    an option (the group's own options, ``--debug``, ``--version``, ``-h``, take no value)."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word
    return None


def app_for(argv: list[str]) -> typer.Typer:
    """The app to run for ``argv``: one holding only the command it invokes, or the whole
    app when it names none (``corral``, ``corral --help``) or an unknown one (whose error
    suggests the nearest names).

    Typer turns every registered command into a click command, with all its options, each
    time the app runs; doing that for the one command invoked keeps start-up independent of
    how many commands corral has (``benchmarks/launch_overhead.py``). The help and errors
    of the command are the same either way (``tests/cli/test_help.py``)."""
    name = _command_name(argv)
    entry = _BY_NAME.get(name) if name is not None else None
    if entry is None:
        return full_app()
    return _new_app(entry)


def main() -> None:
    sys.exit(app_for(sys.argv[1:])(prog_name="corral") or 0)
