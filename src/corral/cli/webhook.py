"""``corral webhook verify``: check a webhook request's signature the way a receiver should."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from corral.cli.errors import CorralGroup

app = typer.Typer(
    cls=CorralGroup,
    help="Webhooks: check the signature of a request corral sent.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _group() -> None:
    """Webhooks: check the signature of a request corral sent (see docs/webhooks.md)."""


@app.command("verify")
def verify(
    secret_name: str = typer.Option(
        None,
        "--secret",
        metavar="NAME",
        help="The secret's name, found as the controller finds it: corral's secret store "
        "(`corral secret set NAME`), then the environment variable NAME.",
    ),
    secret_env: str = typer.Option(
        None,
        "--secret-env",
        metavar="NAME",
        help="Environment variable that holds the secret (the environment only).",
    ),
    timestamp: str = typer.Option(
        ..., "--timestamp", metavar="T", help="The X-Corral-Timestamp header (unix seconds)."
    ),
    signature: str = typer.Option(
        ..., "--signature", metavar="S", help="The X-Corral-Signature header (sha256=<hex>)."
    ),
    body: str = typer.Option(
        "-", "--body", metavar="FILE", help="File with the raw request body; '-' reads stdin."
    ),
    tolerance: float = typer.Option(
        300.0,
        "--tolerance",
        metavar="SECONDS",
        help="Largest difference between the timestamp and now, in seconds (0: no check).",
    ),
    json_: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Exit 0 if SIGNATURE is the HMAC-SHA256 of "<timestamp>.<body>" with the secret and the
    timestamp is recent enough; 1 if not; 2 if the secret or the body cannot be read.

    Give the secret with --secret NAME (corral's secret store, then the environment) or
    --secret-env NAME (the environment only). The body must be the exact bytes received (do
    not re-encode the JSON)."""
    from corral.cli.output import console, print_json
    from corral.errors import BadInput
    from corral.service.webhooks import (
        SignatureInvalid,
        rejected,
        verify_signature,
        webhook_secret,
    )

    if (secret_name is None) == (secret_env is None):
        raise BadInput("give the webhook secret with one of --secret NAME or --secret-env NAME")
    if secret_name is not None:
        secret = webhook_secret(secret_name)
    else:
        secret = os.environ.get(secret_env or "") or ""
        if not secret:
            raise BadInput(f"the environment variable {secret_env} (the webhook secret) is not set")
    data = _read_body(body)
    try:
        result = verify_signature(secret, timestamp, data, signature, tolerance=tolerance)
    except SignatureInvalid as e:
        if not json_:
            raise
        print_json(rejected(e))
        raise typer.Exit(e.exit_code) from None
    if json_:
        print_json(result)
    else:
        console.print(f"signature valid ({result.bytes} bytes, timestamp {result.age_s:.0f}s old)")


def _read_body(source: str) -> bytes:
    from corral.errors import BadInput

    if source == "-":
        import sys

        return sys.stdin.buffer.read()
    try:
        return Path(source).read_bytes()
    except OSError as e:
        raise BadInput(f"cannot read the body from {source}: {e.strerror or e}") from None
