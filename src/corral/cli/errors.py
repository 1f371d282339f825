"""Turn every error into one clear line and a documented exit code (see corral.errors)."""

from __future__ import annotations

import traceback
from typing import Any

import click
import typer
import typer.core

from corral.cli.helptext import unwrap_command
from corral.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, CorralError

DEBUG = {"on": False}


def _print_error(text: str) -> None:
    from corral.cli.output import err_console

    err_console.print(f"[bold red]error:[/] {text}", markup=True, highlight=False, soft_wrap=True)


class CorralGroup(typer.core.TyperGroup):
    """Click group that maps exceptions to messages and exit codes, for the real CLI and for
    tests through the CLI runner alike. Its help and its commands' help are unwrapped
    (:mod:`corral.cli.helptext`): the terminal wraps them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # click 8.4+ suggests the nearest command names itself (NoSuchCommand); typer's own
        # suggestion on top of it said "Did you mean 'launch'?" twice
        if hasattr(click.exceptions, "NoSuchCommand"):
            self.suggest_commands = False
        unwrap_command(self)
        for command in self.commands.values():
            unwrap_command(command)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        unwrap_command(cmd)
        super().add_command(cmd, name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, click.ClickException):
            raise
        except CorralError as e:
            if DEBUG["on"]:
                traceback.print_exc()
            _print_error(_escape(str(e)))
            raise typer.Exit(e.exit_code) from None
        except BrokenPipeError:  # `corral ... | head`: the reader left; nothing to report
            import os
            import sys

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0) from None
        except KeyboardInterrupt:
            _print_error("interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as e:
            if DEBUG["on"]:
                traceback.print_exc()
            _print_error(
                f"internal error: {type(e).__name__}: {_escape(str(e))} "
                "(this is a bug; run with --debug for the traceback)"
            )
            raise typer.Exit(EXIT_INTERNAL) from None


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
