"""Regenerate corral's AWS on-demand price catalog from SkyPilot's public catalog or from the
AWS Price List API.

From the SkyPilot catalog (``skypilot-org/skypilot-catalog``, ``catalogs/v8/aws/vms.csv``: every
instance type with its accelerators, vCPUs, memory and on-demand price, per availability zone,
read by SkyPilot from AWS's own price files; no AWS account needed)::

    git clone --depth 1 https://github.com/skypilot-org/skypilot-catalog /tmp/skypilot-catalog
    python scripts/aws_price_catalog.py \
        --skypilot-csv /tmp/skypilot-catalog/catalogs/v8/aws/vms.csv \
        --source-commit "$(git -C /tmp/skypilot-catalog log -1 --format='%h %cs' -- catalogs/v8/aws/vms.csv)"

or from the excerpt of that file kept in this repository
(``scripts/data/skypilot-catalog-v8-aws-vms-gpu.csv``: its GPU rows, one per region; see
docs/providers.md for the version it was read from)::

    python scripts/aws_price_catalog.py --skypilot-csv scripts/data/skypilot-catalog-v8-aws-vms-gpu.csv \
        --source-commit 00148f2af367 --source-note "$(cat scripts/data/skypilot-catalog-v8-aws-vms-gpu.note)"

Every row with an NVIDIA GPU whose family runs an x86_64 image is kept (Graviton ``g5g`` and the
Grace ``p6e-gb*`` are left out: corral's default AMI is x86_64), each region's price once (the
file repeats it per zone). A fractional GPU (``g6f``: 1/8 to 1/2 of an L4) is written with
``gpu_count`` 0 and its ``gpu_fraction``; corral offers only whole GPUs, so no offer comes of
it. The GPU gets corral's name (``A100-80GB`` is an ``A100`` with 80 GB, AWS's ``RTX PRO Server
6000`` an ``RTXPRO6000``).

From the AWS Price List API (credentials with ``pricing:GetProducts``)::

    python scripts/aws_price_catalog.py                     # write src/corral/pricing/data/aws-ec2-<today>.json
    python scripts/aws_price_catalog.py --dry-run           # show what would change, write nothing
    python scripts/aws_price_catalog.py --types p5e.48xlarge,p6-b200.48xlarge --regions us-east-1,us-west-2

It asks ``pricing.get_products`` (boto3, the ``pricing`` endpoint in us-east-1; credentials from
the usual boto3 chain, with ``pricing:GetProducts`` allowed) for each GPU instance type: Linux,
shared tenancy, no pre-installed software, capacity status "Used", every region at once, all
pages. Each answer's product attributes give the vCPUs, memory, GPU count and GPU memory; its
on-demand term gives the USD price per hour. The GPU model is not in the Price List: it comes
from the instance family (:data:`FAMILY_GPUS`) or the current catalog. Types with a fractional
GPU (g6f) are left out: corral schedules whole GPUs.

The catalog is dated with the day the prices were read (``--date`` to set it), names its
source (the file and ``--source-commit``), is validated with corral's own catalog model, and is
written next to the bundled one; the newest date wins. The old file can then be deleted.
``--endpoint-url`` points the Price List client elsewhere (the tests' fake).
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from corral.pricing.catalog import Catalog, catalog_files, read_catalog
from corral.providers.aws.prices import on_demand_price, parse_products, product_filters
from corral.providers.common.gpu_names import canonical_name

DATA = Path(__file__).resolve().parents[1] / "src" / "corral" / "pricing" / "data"

#: the GPU model of each GPU instance family (the Price List does not name it)
FAMILY_GPUS = {
    "g4dn": "T4",
    "g5": "A10G",
    "g6": "L4",
    "g6e": "L40S",
    "g6f": "L4",
    "g7e": "RTXPRO6000",
    "gr6": "L4",
    "gr6f": "L4",
    "p3": "V100",
    "p3dn": "V100",
    "p4d": "A100",
    "p4de": "A100",
    "p5": "H100",
    "p5e": "H200",
    "p5en": "H200",
    "p6-b200": "B200",
    "p6-b300": "B300",
    "p6e-gb200": "B200",
}
#: asked besides the current catalog's types (newer GPU instances)
EXTRA_TYPES = (
    "p4de.24xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "p6-b300.48xlarge",
    "p5.4xlarge",
    "g6f.large",
    "g6f.xlarge",
    "g6f.2xlarge",
    "g6f.4xlarge",
)
_SIZE = re.compile(r"^\s*([\d.]+)\s*(GiB|GB|TiB|TB)?\s*$", re.I)


def term_filters(instance_type: str) -> list[dict[str, str]]:
    """The ``get_products`` filters of one instance type's on-demand Linux price."""
    return product_filters(instance_type=instance_type)


def _gib(text: Any) -> float | None:
    m = _SIZE.match(str(text or ""))
    if not m:
        return None
    value = float(m.group(1))
    return value * 1024 if (m.group(2) or "").upper().startswith("T") else value


def products(client: Any, instance_type: str) -> list[dict[str, Any]]:
    """Every Price List product of ``instance_type`` (all pages), parsed."""
    out = []
    pages = client.get_paginator("get_products").paginate(
        ServiceCode="AmazonEC2", Filters=term_filters(instance_type), FormatVersion="aws_v1"
    )
    for page in pages:
        out += parse_products(page.get("PriceList", []))
    return out


def entry_for(
    instance_type: str, items: list[dict[str, Any]], regions: list[str], gpu_type: str | None
) -> tuple[dict[str, Any] | None, str]:
    """(catalog entry, "") or (None, why it is left out)."""
    prices: dict[str, float] = {}
    attrs: dict[str, Any] = {}
    for item in items:
        a = (item.get("product") or {}).get("attributes") or {}
        if a.get("instanceType") != instance_type or a.get("regionCode") not in regions:
            continue
        price = on_demand_price(item)
        if price is not None:
            prices[a["regionCode"]] = round(price, 6)
            attrs = attrs or a
    if not prices:
        return None, "no on-demand Linux price in the regions asked"
    try:
        count = float(attrs.get("gpu") or 0)
    except ValueError:
        count = 0
    if count != int(count):
        return None, f"a fractional GPU ({count:g}): corral schedules whole GPUs"
    if count and not gpu_type:
        return None, "GPU model unknown (add its family to FAMILY_GPUS)"
    total = _gib(attrs.get("gpuMemory"))
    entry = {
        "instance_type": instance_type,
        "gpu_type": gpu_type if count else None,
        "gpu_count": int(count),
        "gpu_memory_gb": round(total / count, 1) if total and count else None,
        "vcpus": float(attrs.get("vcpu") or 0),
        "memory_gb": _gib(attrs.get("memory")) or 0.0,
        "prices": dict(sorted(prices.items())),
    }
    return entry, ""


def build(
    client: Any, types: list[str], regions: list[str], day: str, known: Catalog | None
) -> tuple[Catalog, list[str]]:
    """The new catalog and one note per type left out."""
    entries, notes = [], []
    for itype in types:
        family = itype.split(".")[0]
        old = known.entry(itype) if known else None
        gpu = FAMILY_GPUS.get(family) or (old.gpu_type if old else None)
        entry, why = entry_for(itype, products(client, itype), regions, gpu)
        if entry is None:
            notes.append(f"{itype}: left out: {why}")
        else:
            entries.append(entry)
    catalog = Catalog.model_validate(
        {
            "provider": "aws",
            "service": "ec2",
            "date": day,
            "price_kind": "on-demand, Linux, shared tenancy",
            "source": f"AWS Price List API (pricing.get_products, AmazonEC2) read on {day} "
            "by scripts/aws_price_catalog.py",
            "note": "A catalog, not a quote. Spot prices are never in this file: they come "
            "live from describe_spot_price_history.",
            "entries": entries,
        }
    )
    return catalog, notes


#: families whose instances need an arm64 image (Graviton, Grace): not for corral's x86_64 AMI
ARM_FAMILY = re.compile(r"^[a-z]+\d+[a-z]*g$|^p6e-gb\d+$")
SKYPILOT_FILE = "skypilot-org/skypilot-catalog catalogs/v8/aws/vms.csv"
SKYPILOT_COLUMNS = (
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "vCPUs",
    "MemoryGiB",
    "GpuInfo",
    "Price",
    "Region",
)


def gpu_name(accelerator: str) -> str:
    """corral's GPU name of a SkyPilot accelerator name (``A100-80GB``: ``A100``)."""
    return canonical_name(accelerator)


def _nvidia(info: str) -> tuple[int, float | None] | None:
    """(GPU count, memory of one GPU in GB) of a SkyPilot ``GpuInfo`` cell, None unless NVIDIA."""
    try:
        data = ast.literal_eval(info)
        gpus = data["Gpus"]
    except (ValueError, SyntaxError, KeyError, TypeError):
        return None
    if not gpus or any(str(g.get("Manufacturer", "")).upper() != "NVIDIA" for g in gpus):
        return None
    mib = (gpus[0].get("MemoryInfo") or {}).get("SizeInMiB")
    count = sum(int(g.get("Count") or 0) for g in gpus)
    return count, (round(float(mib) / 1024, 1) if mib else None)


def skypilot_entries(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Catalog entries of the NVIDIA GPU instance types of a SkyPilot ``vms.csv``, and one
    note per type left out."""
    shapes: dict[str, dict[str, Any]] = {}
    notes: dict[str, str] = {}
    unpriced: set[str] = set()
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in SKYPILOT_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"not a SkyPilot vms.csv: no column {', '.join(missing)}")
        for row in reader:
            itype = row["InstanceType"]
            if not row.get("GpuInfo") or itype in notes:
                continue
            family = itype.split(".")[0]
            gpus = _nvidia(row["GpuInfo"])
            if gpus is None:
                notes[itype] = f"{itype}: left out: not an NVIDIA GPU"
                continue
            if ARM_FAMILY.match(family):
                notes[itype] = f"{itype}: left out: an arm64 instance (corral's AMI is x86_64)"
                continue
            try:
                price = float(row["Price"])
            except ValueError:  # no on-demand price in this zone (capacity blocks only, say)
                unpriced.add(itype)
                continue
            count = float(row.get("AcceleratorCount") or gpus[0])
            entry = shapes.setdefault(
                itype,
                {
                    "instance_type": itype,
                    "gpu_type": gpu_name(row["AcceleratorName"]),
                    "gpu_count": int(count) if count == int(count) else 0,
                    "gpu_memory_gb": gpus[1],
                    "vcpus": float(row["vCPUs"]),
                    "memory_gb": float(row["MemoryGiB"]),
                    "prices": {},
                },
            )
            if count != int(count):
                entry["gpu_fraction"] = count
            entry["prices"].setdefault(row["Region"], round(price, 6))
    for itype in sorted(unpriced - set(shapes) - set(notes)):
        notes[itype] = f"{itype}: left out: no on-demand price in any region of the source"
    entries = [
        {**e, "prices": dict(sorted(e["prices"].items()))}
        for _, e in sorted(shapes.items(), key=lambda kv: _type_order(kv[0]))
    ]
    return entries, sorted(notes.values())


def _type_order(itype: str) -> tuple[str, float, str]:
    family, _, size = itype.partition(".")
    m = re.match(r"^(\d*)xlarge$", size)
    rank = float(m.group(1) or 1) if m else {"large": 0.5, "medium": 0.25}.get(size, 1e6)
    return family, rank, size


def build_from_skypilot(
    path: Path, day: str, commit: str, source_note: str = "", read_on: str | None = None
) -> tuple[Catalog, list[str]]:
    """The catalog of a SkyPilot ``vms.csv`` whose prices date from ``day``, read on
    ``read_on`` (default ``day``; ``commit``: its version; ``source_note``: what else is
    known of it, such as how its date was worked out)."""
    entries, notes = skypilot_entries(path)
    if not entries:
        raise ValueError("no NVIDIA GPU instance type with an on-demand price in it")
    where = f"{SKYPILOT_FILE}" + (f" at {commit}" if commit else "")
    where += f" ({source_note.strip()})" if source_note.strip() else ""
    catalog = Catalog.model_validate(
        {
            "provider": "aws",
            "service": "ec2",
            "date": day,
            "price_kind": "on-demand, Linux, shared tenancy",
            "source": f"{where}, read on {read_on or day} by scripts/aws_price_catalog.py (SkyPilot "
            "builds it from AWS's published price files); every region it lists",
            "note": "A catalog, not a quote: corral reads on-demand prices live from the AWS "
            "Price List API where it can, and this file where it cannot. Spot prices are never "
            "in this file: they come live from describe_spot_price_history.",
            "entries": entries,
        }
    )
    return catalog, notes


def changes(old: Catalog | None, new: Catalog) -> list[str]:
    """Human lines for what moved between two catalogs."""
    lines = []
    for e in new.entries:
        before = old.entry(e.instance_type) if old else None
        if before is None:
            lines.append(f"+ {e.instance_type} ({e.gpu_type} x{e.gpu_count})")
            continue
        for region, price in e.prices.items():
            was = before.prices.get(region)
            if was is not None and abs(was - price) > 1e-6:
                lines.append(f"~ {e.instance_type} {region}: {was:g} -> {price:g}")
    for e in old.entries if old else []:
        if new.entry(e.instance_type) is None:
            lines.append(f"- {e.instance_type}")
    return lines


def main(argv: list[str] | None = None, client: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--types",
        help="instance types, comma separated (default: the "
        "current catalog's and newer GPU instances)",
    )
    parser.add_argument(
        "--regions", help="regions, comma separated (default: the current catalog's)"
    )
    parser.add_argument(
        "--date",
        help="the day the prices were written down, YYYY-MM-DD (default: today, UTC): what "
        "corral's staleness warning counts from",
    )
    parser.add_argument(
        "--read-on", help="the day the source was read, when it is not --date (YYYY-MM-DD)"
    )
    parser.add_argument("--out", type=Path, default=DATA, help="directory to write to")
    parser.add_argument("--endpoint-url", help="Price List endpoint (default: AWS's)")
    parser.add_argument(
        "--skypilot-csv",
        type=Path,
        help="build from this SkyPilot catalogs/v8/aws/vms.csv instead of the Price List API",
    )
    parser.add_argument(
        "--source-commit", default="", help="the skypilot-catalog commit the CSV comes from"
    )
    parser.add_argument(
        "--source-note", default="", help="what else is known of that version (its date)"
    )
    parser.add_argument("--dry-run", action="store_true", help="write nothing")
    args = parser.parse_args(argv)
    files = catalog_files("aws", "ec2", args.out) or catalog_files("aws", "ec2")
    known = read_catalog(files[-1]) if files else None
    types = [t.strip() for t in (args.types or "").split(",") if t.strip()]
    if not types:
        types = [e.instance_type for e in known.entries] if known else []
        types += [t for t in EXTRA_TYPES if t not in types]
    regions = [r.strip() for r in (args.regions or "").split(",") if r.strip()]
    regions = regions or (known.regions() if known else ["us-east-1"])
    day = args.date or datetime.now(UTC).date().isoformat()
    if args.skypilot_csv is not None:
        try:
            catalog, notes = build_from_skypilot(
                args.skypilot_csv, day, args.source_commit, args.source_note, args.read_on
            )
        except (OSError, KeyError, ValueError) as exc:  # one line, never a traceback
            print(
                f"aws_price_catalog: {args.skypilot_csv}: {type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
            return 1
        return _write(catalog, notes, known, args.out, day, args.dry_run)
    if client is None:
        import boto3

        client = boto3.client("pricing", region_name="us-east-1", endpoint_url=args.endpoint_url)
    try:
        catalog, notes = build(client, types, regions, day, known)
    except Exception as exc:  # botocore's errors: one line, never a traceback
        print(f"aws_price_catalog: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return _write(catalog, notes, known, args.out, day, args.dry_run)


def _write(
    catalog: Catalog, notes: list[str], known: Catalog | None, out: Path, day: str, dry: bool
) -> int:
    for line in notes + changes(known, catalog):
        print(line)
    target = out / f"aws-ec2-{day}.json"
    if dry:
        print(f"{len(catalog.entries)} instance types; not written (--dry-run)")
        return 0
    text = json.dumps(catalog.model_dump(mode="json", exclude_none=True), indent=1) + "\n"
    try:
        target.write_text(text)
    except OSError as exc:  # one line, never a traceback
        print(f"aws_price_catalog: cannot write {target}: {exc.strerror}", file=sys.stderr)
        return 1
    regions = len(catalog.regions())
    print(f"wrote {target} ({len(catalog.entries)} instance types, {regions} regions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
