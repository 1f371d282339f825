"""Spending caps across runs: each cap with what it has spent; set and remove them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Path
from pydantic import BaseModel, ConfigDict, Field

from corral.server import deps
from corral.server.auth import reader, writer
from corral.server.openapi import READ, WRITE, errors
from corral.service import caps
from corral.service.caps import MAX_CAP_USD, CapList, CapView
from corral.service.session import Store
from corral.service.tokens import TokenView

router = APIRouter(prefix="/api/v1/budget", tags=["budget"])

#: a user's (an API token's) or a project's name: the rule both share
SUBJECT = r"^[a-z0-9][a-z0-9_.-]{0,62}$"


class _Cap(BaseModel):
    model_config = ConfigDict(extra="forbid")

    amount_usd: float = Field(gt=0, le=MAX_CAP_USD, description="dollars")
    warn_at: float = Field(default=0.9, gt=0, le=1, description="warn at this share")
    period: Literal["month", "total"] = Field(
        default="month", description="a calendar month (UTC), or in all"
    )


class TeamCap(_Cap):
    """A cap over every run."""

    scope: Literal["team"]


class UserCap(_Cap):
    """A cap over the runs a user (an API token's name) launched."""

    scope: Literal["user"]
    subject: str = Field(pattern=SUBJECT, description="the token's name")


class ProjectCap(_Cap):
    """A cap over the runs whose spec's `project` is this."""

    scope: Literal["project"]
    subject: str = Field(pattern=SUBJECT, description="the project")


CapRequest = Annotated[TeamCap | UserCap | ProjectCap, Field(discriminator="scope")]


@router.get(
    "", dependencies=[Depends(reader)], responses={200: {"model": CapList}, **errors(*READ)}
)
def list_caps(store: Store = Depends(deps.store)) -> Any:
    """Every spending cap with what it has spent in its period (a calendar month, UTC, or in
    all), what is left and how many runs bill against it now."""
    return caps.list_caps(store=store).to_json()


@router.post("", responses={200: {"model": CapView}, **errors(*WRITE)})
def set_cap(
    body: CapRequest = Body(),
    store: Store = Depends(deps.store),
    token: TokenView = Depends(writer),
) -> Any:
    """Create or replace a cap: the team's, a user's or a project's."""
    return caps.set_cap(
        body.scope,
        getattr(body, "subject", None),
        body.amount_usd,
        warn_at=body.warn_at,
        period=body.period,
        set_by=token.name,
        store=store,
    ).to_json()


@router.delete(
    "/team",
    dependencies=[Depends(writer)],
    responses={200: {"model": CapView}, **errors(*WRITE, 404)},
)
def remove_team_cap(store: Store = Depends(deps.store)) -> Any:
    """Remove the team's cap; 404 when there is none."""
    return caps.remove_cap("team", None, store=store).to_json()


@router.delete(
    "/{scope}/{subject}",
    dependencies=[Depends(writer)],
    responses={200: {"model": CapView}, **errors(*WRITE, 404)},
)
def remove_cap(
    scope: Literal["user", "project"],
    subject: str = Path(pattern=SUBJECT),
    store: Store = Depends(deps.store),
) -> Any:
    """Remove a user's or a project's cap; 404 when there is none."""
    return caps.remove_cap(scope, subject, store=store).to_json()
