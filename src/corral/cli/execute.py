"""``corral exec RUN -- CMD [ARG...]``: run a command on a run's machine through its agent and
stream its output; corral exits with the command's exit code (:mod:`corral.service.execute`)."""

from __future__ import annotations

import typer


def exec_(
    run_ref: str = typer.Argument(..., metavar="RUN", help="Run id, id prefix or name."),
    command: list[str] = typer.Argument(
        None, metavar="-- CMD [ARG...]", help="The command and its arguments (no shell)."
    ),
    timeout: float = typer.Option(
        600.0, "--timeout", help="Seconds the command may run before it is killed (exit 124)."
    ),
    json_: bool = typer.Option(
        False, "--json", help="Print one JSON object (the outcome and the output) at the end."
    ),
    node: int = typer.Option(
        None, "--node", min=0, help="A multi-node run: on this node (default: 0, the head)."
    ),
) -> None:
    """Run a command on the machine of a running run (say `corral exec RUN -- nvidia-smi`),
    in its workdir with the job's environment and GPUs, and print its output as it comes.
    The exit code is the command's (124: it timed out). No shell: `-- bash -c '...'` for
    one. Audited in the run's events (who, the command, the exit code)."""
    import sys

    from corral.service.execute import exec_command

    parts: list[str] = []

    def show(text: str) -> None:
        if json_:
            parts.append(text)
        else:
            sys.stdout.write(text)
            sys.stdout.flush()

    argv = list(command or [])
    if argv[:1] == ["--"]:  # the separator itself, when the parser leaves it in
        argv = argv[1:]
    result = exec_command(run_ref, argv, on_output=show, timeout_s=timeout, node=node)
    if json_:
        from corral.cli.output import print_json

        print_json({**result.to_json(), "output": "".join(parts)})
    raise typer.Exit(result.exit_code)
