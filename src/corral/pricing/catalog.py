"""Dated price catalogs bundled with corral: ``pricing/data/<provider>-<service>-<date>.json``.

A catalog is what a provider does not publish live (or not cheaply): machine shapes and their
on-demand prices per region, written down on a date. Every offer built from it carries that
date (``Offer.catalog_date``), so a user can tell a list price from a live one. Live prices
(spot markets) are never stored here; providers fetch them and cache them next to the catalog.

File format (JSON)::

    {"kind": "catalog", "provider": "aws", "service": "ec2", "date": "2025-05-01",
     "currency": "USD", "unit": "per instance-hour", "price_kind": "...", "source": "...",
     "note": "...",
     "entries": [{"instance_type": "g5.xlarge", "gpu_type": "A10G", "gpu_count": 1,
                  "gpu_memory_gb": 24, "vcpus": 4, "memory_gb": 16,
                  "prices": {"us-east-1": 1.006, ...}}, ...]}

When several files exist for one provider and service, the newest date wins.
"""

from __future__ import annotations

import functools
import json
import re
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from corral.errors import CorralError

_NAME_RE = re.compile(
    r"^(?P<provider>[a-z0-9]+)-(?P<service>[a-z0-9]+)-(?P<date>\d{4}-\d{2}-\d{2})\.json$"
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CatalogEntry(_Model):
    """One machine shape and its on-demand price in each region where it is sold."""

    instance_type: str = Field(min_length=1)
    gpu_type: str | None = None
    gpu_count: int = Field(0, ge=0)
    gpu_memory_gb: float | None = Field(None, gt=0, description="Memory of one GPU.")
    gpu_fraction: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="A share of one GPU (gpu_count is then 0): listed, never offered, since "
        "corral schedules whole GPUs.",
    )
    vcpus: float = Field(gt=0)
    memory_gb: float = Field(gt=0)
    prices: dict[str, float] = Field(description="Region -> USD per hour (on-demand).")

    @model_validator(mode="after")
    def _check(self) -> CatalogEntry:
        if (self.gpu_count > 0 or self.gpu_fraction) and not self.gpu_type:
            raise ValueError(f"{self.instance_type}: GPUs without a gpu_type")
        if self.gpu_fraction is not None and self.gpu_count:
            raise ValueError(f"{self.instance_type}: a GPU fraction with whole GPUs")
        if any(p < 0 for p in self.prices.values()):
            raise ValueError(f"{self.instance_type}: a negative price")
        return self


class Catalog(_Model):
    kind: Literal["catalog"] = "catalog"
    provider: str
    service: str
    date: str = Field(description="Day the prices were written down (YYYY-MM-DD).")
    currency: Literal["USD"] = "USD"
    unit: str = "per instance-hour"
    price_kind: str = ""
    source: str = ""
    note: str = ""
    entries: list[CatalogEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> Catalog:
        date.fromisoformat(self.date)
        seen: set[str] = set()
        for e in self.entries:
            if e.instance_type in seen:
                raise ValueError(f"{e.instance_type} is listed twice")
            seen.add(e.instance_type)
        return self

    def entry(self, instance_type: str) -> CatalogEntry | None:
        return next((e for e in self.entries if e.instance_type == instance_type), None)

    def regions(self) -> list[str]:
        return sorted({r for e in self.entries for r in e.prices})


class CatalogError(CorralError):
    """A bundled catalog is missing or malformed (a packaging bug)."""

    code = "catalog_error"


def _data_dir() -> Path:
    return Path(str(resources.files("corral.pricing") / "data"))


def catalog_files(provider: str, service: str, directory: Path | None = None) -> list[Path]:
    """The catalog files of ``provider``/``service``, oldest first."""
    found = []
    base = directory or _data_dir()
    for path in base.glob(f"{provider}-{service}-*.json"):
        m = _NAME_RE.match(path.name)
        if m and m["provider"] == provider and m["service"] == service:
            found.append((m["date"], path))
    return [p for _, p in sorted(found)]


def read_catalog(path: Path) -> Catalog:
    """Parse one catalog file; a bad file is :class:`CatalogError` naming the file."""
    try:
        return Catalog.model_validate(json.loads(path.read_text()))
    except OSError as exc:
        raise CatalogError(f"cannot read price catalog {path.name}: {exc.strerror}") from None
    except ValueError as exc:  # JSON or validation
        if isinstance(exc, ValidationError):
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(x) for x in first["loc"]) or "catalog"
            raise CatalogError(f"price catalog {path.name}: {where}: {first['msg']}") from None
        raise CatalogError(f"price catalog {path.name} is not valid JSON: {exc}") from None


@functools.cache
def load_catalog(provider: str, service: str) -> Catalog:
    """The newest bundled catalog of ``provider``/``service`` (read once per process)."""
    files = catalog_files(provider, service)
    if not files:
        raise CatalogError(f"no price catalog for {provider} {service} is bundled with corral")
    return read_catalog(files[-1])
