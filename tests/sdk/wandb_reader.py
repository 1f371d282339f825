"""Read the records of an offline W&B run file (``run-<id>.wandb``) back, for tests.

The file is W&B's LevelDB-log-style record stream: a 7-byte header (``:W&B``, a 2-byte magic,
a version byte), then 32 KiB blocks of chunks, each with a 7-byte header (crc32, length,
type: 1 full, 2 first, 3 middle, 4 last). Each record is a ``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from support.waiting import wait_until

_BLOCK = 32 * 1024
_HEADER = 7


def read_records(path: Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    pos, pending, out = _HEADER, b"", []
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        pos += _HEADER
        if kind == 0 and length == 0:
            break
        chunk = data[pos : pos + length]
        pos += length
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            out.append(pending + chunk)
            pending = b""
    records = []
    for raw in out:
        record = pb.Record()
        record.ParseFromString(raw)
        records.append(record)
    return records


def history(path: Path) -> list[dict[str, Any]]:
    """The logged rows (``run.log`` calls), with ``_step``."""
    rows = []
    for record in read_records(path):
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {
                    (item.key or "/".join(item.nested_key)): json.loads(item.value_json)
                    for item in record.history.item
                }
            )
    return rows


def run_ids(path: Path) -> list[str]:
    return [r.run.run_id for r in read_records(path) if r.WhichOneof("record_type") == "run"]


def wait_until_written(path: Path, timeout: float = 30.0) -> None:
    """Wait for the run's ``exit`` record: ``run.finish()`` can return before W&B's service
    process has flushed an offline run file (it holds only the header for a moment)."""
    kinds: list[str] = []

    def written() -> bool:
        kinds[:] = [r.WhichOneof("record_type") for r in read_records(path)]
        return "exit" in kinds

    wait_until(written, timeout, 0.1, lambda: f"an exit record in {path}; it has {kinds}")
