"""``corral validate FILE [--set k=v ...] [--json]``: check a job spec and print it resolved."""

from __future__ import annotations

from pathlib import Path

import typer


def validate(
    file: Path = typer.Argument(..., help="The job spec (a directory means its corral.yaml)."),
    set_: list[str] = typer.Option(
        [],
        "--set",
        help="Override a key before validating, e.g. --set resources.gpus=L40S:2 or "
        "--set stages.train.run='python train.py' (value parsed as YAML; repeatable).",
    ),
    json_: bool = typer.Option(
        False, "--json", help="Print the resolved spec as JSON instead of YAML."
    ),
) -> None:
    """Validate a job spec and print it with every default filled in and paths resolved.

    Problems are reported one per line as FILE:LINE: FIELD: MESSAGE (exit code 2). What the
    spec allows but would quietly lose work is a warning on stderr, FILE: warning: FIELD:
    MESSAGE (exit code 0).
    """
    import sys

    from corral.spec import load_spec, spec_to_yaml
    from corral.spec.advice import spec_warnings

    spec = load_spec(file, overrides=set_)
    for warning in spec_warnings(spec):
        sys.stderr.write(f"{file}: warning: {warning}\n")
    if json_:
        sys.stdout.write(spec.model_dump_json(indent=2) + "\n")
        return
    text = spec_to_yaml(spec)
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.syntax import Syntax

        Console().print(Syntax(text, "yaml", background_color="default"))
    else:
        sys.stdout.write(text)
