"""One stage of the 8-GPU pipeline demo: check the GPUs corral gave it, work, write its output.

    python stage.py detection --gpus 4
    python stage.py evaluate --gpus 1 --needs detection recognition lm

A stage prints what corral told it (``CUDA_VISIBLE_DEVICES``, ``CORRAL_STAGE``,
``CORRAL_NUM_GPUS``), checks that it sees exactly ``--gpus`` devices, "works" for
``--seconds`` (default ``$PIPELINE_SECONDS`` or 3) while reporting progress, and writes
``<out-dir>/<name>.json``. A stage with ``--needs`` first checks that those stages' outputs exist
and belong to this run, and also writes ``<out-dir>/report.json`` comparing them.

Exit codes: 0 done, 2 bad arguments, 3 wrong GPUs, 4 a needed output is missing or stale.
The stages need no GPU to run: the devices are corral's declared inventory
(``CORRAL_FAKE_GPUS=L40S:8``), and only their assignment is checked.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

EXIT_WRONG_GPUS = 3
EXIT_MISSING_INPUT = 4
TICK_SECONDS = 0.25


class StageFailed(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="One stage of the corral pipeline demo.")
    p.add_argument("name", help="stage name (also the output file name)")
    p.add_argument("--gpus", type=int, required=True, help="devices this stage must see")
    p.add_argument("--needs", nargs="*", default=[], help="stages whose outputs are inputs")
    p.add_argument(
        "--seconds",
        type=float,
        default=float(os.environ.get("PIPELINE_SECONDS", "3")),
        help="how long to work, in seconds (default $PIPELINE_SECONDS or 3)",
    )
    p.add_argument("--out-dir", default="out", help="where outputs go (default ./out)")
    args = p.parse_args(argv)
    if args.gpus < 0 or args.seconds < 0:
        p.error("--gpus and --seconds must be >= 0")
    return args


def visible_devices(environ: dict[str, str], expected: int) -> list[str]:
    """The devices in ``CUDA_VISIBLE_DEVICES``, checked against ``expected`` and against
    ``CORRAL_NUM_GPUS`` when corral set it; :class:`StageFailed` (exit 3) otherwise."""
    raw = environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        raise StageFailed(
            EXIT_WRONG_GPUS,
            f"CUDA_VISIBLE_DEVICES is not set (every GPU visible); expected exactly {expected}",
        )
    devices = [d.strip() for d in raw.split(",") if d.strip()]
    if len(set(devices)) != len(devices):
        raise StageFailed(EXIT_WRONG_GPUS, f"CUDA_VISIBLE_DEVICES={raw!r} repeats a device")
    if len(devices) != expected:
        raise StageFailed(
            EXIT_WRONG_GPUS,
            f"expected {expected} GPU(s), got {len(devices)} (CUDA_VISIBLE_DEVICES={raw!r})",
        )
    declared = environ.get("CORRAL_NUM_GPUS")
    if declared is not None and declared.strip() != str(expected):
        raise StageFailed(
            EXIT_WRONG_GPUS, f"expected {expected} GPU(s), but CORRAL_NUM_GPUS={declared!r}"
        )
    return devices


def report_progress(step: int, total: int) -> None:
    """Progress for ``corral status`` (a no-op outside corral)."""
    try:
        from corral.sdk import report
    except ImportError:  # the SDK is optional for a stage
        return
    report(step=step, total=total)


def work(seconds: float, clock=time.monotonic, sleep=time.sleep) -> int:
    """Pretend to train for ``seconds``, reporting progress each tick; returns the ticks."""
    total = max(1, round(seconds / TICK_SECONDS))
    start = clock()
    for tick in range(1, total + 1):
        sleep(max(0.0, start + tick * seconds / total - clock()))
        report_progress(tick, total)
    return total


def read_inputs(out_dir: Path, needs: list[str], run_id: str | None) -> dict[str, dict]:
    """The outputs of ``needs``; each must exist and, under corral, come from this run."""
    inputs = {}
    for name in needs:
        path = out_dir / f"{name}.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise StageFailed(EXIT_MISSING_INPUT, f"missing output of stage {name!r}: {path}")
        except (OSError, json.JSONDecodeError) as e:
            raise StageFailed(EXIT_MISSING_INPUT, f"unreadable output of stage {name!r}: {e}")
        if run_id and data.get("run_id") != run_id:
            raise StageFailed(
                EXIT_MISSING_INPUT,
                f"output of stage {name!r} is from run {data.get('run_id')!r}, not {run_id!r}",
            )
        inputs[name] = data
    return inputs


def compare(inputs: dict[str, dict]) -> dict:
    """What the inputs show: disjoint GPU sets, and whether the stages ran in parallel."""
    owners: dict[str, str] = {}
    shared = []
    for name, data in inputs.items():
        for device in data["devices"]:
            if device in owners:
                shared.append(f"{device} ({owners[device]}, {name})")
            owners[device] = name
    spans = [(d["started_at"], d["finished_at"]) for d in inputs.values()]
    overlap = len(spans) > 1 and max(s for s, _ in spans) < min(f for _, f in spans)
    return {
        "stages_ok": len(inputs),
        "gpus_used": len(owners),
        "gpus_disjoint": not shared,
        "shared_gpus": shared,
        "ran_in_parallel": overlap,
        "stages": {
            name: {k: data[k] for k in ("devices", "seconds")} for name, data in inputs.items()
        },
    }


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def run(args: argparse.Namespace, environ: dict[str, str]) -> None:
    print(
        f"[{args.name}] CUDA_VISIBLE_DEVICES={environ.get('CUDA_VISIBLE_DEVICES')!r} "
        f"CORRAL_STAGE={environ.get('CORRAL_STAGE')!r} "
        f"CORRAL_NUM_GPUS={environ.get('CORRAL_NUM_GPUS')!r}",
        flush=True,
    )
    devices = visible_devices(environ, args.gpus)
    out_dir = Path(args.out_dir)
    run_id = environ.get("CORRAL_RUN_ID")
    inputs = read_inputs(out_dir, args.needs, run_id)

    started = time.time()
    ticks = work(args.seconds)
    output = {
        "stage": args.name,
        "run_id": run_id,
        "attempt": environ.get("CORRAL_ATTEMPT"),
        "devices": devices,
        "ticks": ticks,
        "seconds": round(time.time() - started, 3),
        "started_at": started,
        "finished_at": time.time(),
    }
    if inputs:
        result = compare(inputs)
        if not result["gpus_disjoint"]:
            raise StageFailed(EXIT_WRONG_GPUS, f"stages shared GPUs: {result['shared_gpus']}")
        write_json(out_dir / "report.json", {**result, "run_id": run_id})
        print(f"[{args.name}] report: {json.dumps(result)}", flush=True)
    write_json(out_dir / f"{args.name}.json", output)
    print(f"[{args.name}] done on {len(devices)} GPU(s) in {output['seconds']}s", flush=True)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        run(args, dict(os.environ))
    except StageFailed as e:
        print(f"[{args.name}] error: {e}", file=sys.stderr, flush=True)
        return e.code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
