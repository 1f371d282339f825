"""The ``corral`` command. One command per module; heavy imports happen inside commands so
that start-up stays fast."""

from __future__ import annotations

import sys

import typer

from corral import __version__
from corral.cli.errors import DEBUG, CorralGroup

app = typer.Typer(
    cls=CorralGroup,
    name="corral",
    help="Launch GPU training runs and babysit them to the end.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"corral {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks of errors."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    DEBUG["on"] = debug


def _register() -> None:
    from corral.cli import (
        agent,
        cancel,
        controller,
        debug,
        estimate,
        gpus,
        launch,
        logs,
        ls,
        offers,
        preflight,
        secret,
        server,
        status,
        stop,
        token,
        validate,
        webhook,
    )

    app.command("launch")(launch.launch)
    app.command("status")(status.status)
    app.command("ls")(ls.ls)
    app.command("logs")(logs.logs)
    app.command("cancel")(cancel.cancel)
    app.command("stop")(stop.stop)
    app.command("gpus")(gpus.gpus)
    app.command("offers")(offers.offers)
    app.command("estimate")(estimate.estimate)
    app.add_typer(controller.app, name="controller")
    app.command("validate")(validate.validate)
    app.add_typer(webhook.app, name="webhook")
    app.add_typer(debug.app, name="debug")
    app.add_typer(secret.app, name="secret")
    app.command("preflight")(preflight.preflight)
    app.command("server")(server.server)
    app.add_typer(token.app, name="token")
    app.command(
        "agent", context_settings={"ignore_unknown_options": True, "allow_extra_args": True}
    )(agent.agent)


_register()


def main() -> None:
    sys.exit(app(prog_name="corral") or 0)
