"""``corral agent``: run the node agent (normally started by a provider, not by hand)."""

from __future__ import annotations

from pathlib import Path

import typer


def agent(
    plan: Path = typer.Option(..., "--plan", help="Path of the agent plan (JSON)."),
) -> None:
    """Run one attempt's stages on this node and serve the agent API (token from
    CORRAL_AGENT_TOKEN)."""
    from corral.agent.main import main

    raise typer.Exit(main(["--plan", str(plan)]))
