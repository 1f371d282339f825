"""Where a gang's start goes: per phase and per node, waiting told apart from CPU
(``python benchmarks/multinode.py --trace``).

Each timed launch of the multinode benchmark gets a :class:`Trace`: the moments each node
reached on the way from ``corral launch`` to its rank's first step, read from what the run
leaves behind (the fake cloud's records, each agent's ``events.jsonl`` and its stage log,
the job's marks), and the CPU that every process of the benchmark burned meanwhile,
sampled from ``/proc`` by a :class:`CpuMeter`:

- ``cpu``: CPU seconds of the benchmark's processes (the CLI, the controller, the fake
  cloud's timers, the agents, torchrun, the ranks: every process whose command line or
  environment names the benchmark's folder, and their children);
- ``runq``: seconds those processes were runnable but waited for a CPU (the kernel's
  ``schedstat``): how much of the phase was the machine being busy;
- ``busy``: how many of the machine's CPUs were busy, on average, whoever used them;
- ``wait``: ``wall - cpu - runq``, a lower bound of how long none of those processes ran
  or waited for a CPU (each second one of them did adds a second to ``cpu + runq``): pure
  waiting (a poll interval, a backoff, a sleep), whatever the machine's load.

Phases end when the *last* node reaches each moment (the gang's critical path); the per-node
table shows who was last. A single node has no ``gang_start`` (its stage never waits).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

#: the moments of one node, in order; each phase of the table ends at the last node's
MOMENTS: list[tuple[str, str]] = [
    ("launch", "the provider's launch call for the node"),
    ("agent_proc", "the node's agent process started (the machine booted)"),
    ("agent_up", "the agent's attempt started (its API bound)"),
    ("gang_start", "the node got POST /gang/start (the controller saw every node ready)"),
    ("code", "the node's code in place (shipped by the controller, unpacked)"),
    ("stage", "the stage process started (the shim, then torchrun)"),
    ("torchrun", "torchrun imported and starting (LOGLEVEL=INFO's first line)"),
    ("rendezvous", "torchrun's rendezvous complete"),
    ("worker", "the rank's first line ran (python started, before import torch)"),
    ("torch", "the rank imported torch and corral.sdk"),
    ("init", "init_process_group returned"),
    ("step", "the rank's first all-reduced step"),
]


def _iso(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class CpuMeter:
    """Samples, every ``interval`` seconds, the CPU time and run-queue wait of every process
    that belongs to ``root`` (its command line or environment names ``root``, or its parent
    belongs), and the machine's busy CPU time. :meth:`between` answers for a window."""

    def __init__(self, root: str, interval: float = 0.2):
        self.root = root.encode()
        self.interval = interval
        self.tick = os.sysconf("SC_CLK_TCK")
        self._own = os.getpid()
        #: (pid, start ticks) -> (ppid, ours)
        self._known: dict[tuple[int, int], tuple[int, bool]] = {}
        #: (pid, start ticks) -> [(time, cpu s, runq s)]
        self._series: dict[tuple[int, int], list[tuple[float, float, float]]] = {}
        self._machine: list[tuple[float, float]] = []  # (time, busy CPU seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)

    def start(self) -> CpuMeter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def _stat(self, pid: int) -> tuple[int, int, float] | None:
        """(ppid, start ticks, utime + stime seconds) of ``pid``."""
        try:
            raw = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            return None
        rest = raw[raw.rfind(b")") + 2 :].split()
        # fields after the name: state ppid ... utime(11) stime(12) ... starttime(19)
        return int(rest[1]), int(rest[19]), (int(rest[11]) + int(rest[12])) / self.tick

    def _belongs(self, pid: int) -> bool:
        for name in ("cmdline", "environ"):
            try:
                if self.root in Path(f"/proc/{pid}/{name}").read_bytes():
                    return True
            except OSError:
                return False
        return False

    def _runq(self, pid: int) -> float:
        total = 0
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return 0.0
        for tid in tasks:
            try:
                total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue
        return total / 1e9

    def sample(self) -> None:
        now = time.time()
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        ours = {pid for (pid, _), (_, mine) in self._known.items() if mine}
        for pid in pids:
            if pid == self._own:
                continue
            stat = self._stat(pid)
            if stat is None:
                continue
            ppid, started, cpu = stat
            key = (pid, started)
            known = self._known.get(key)
            if known is None or (not known[1] and ppid in ours):
                mine = ppid in ours or self._belongs(pid)
                self._known[key] = (ppid, mine)
                known = self._known[key]
                if mine:
                    ours.add(pid)
            if known[1]:
                self._series.setdefault(key, []).append((now, cpu, self._runq(pid)))
        try:
            fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
            values = [int(v) for v in fields]
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            self._machine.append((now, (sum(values[:8]) - idle) / self.tick))
        except (OSError, ValueError, IndexError):
            pass

    @staticmethod
    def _at(series: list[tuple[float, ...]], t: float, column: int) -> float:
        """The counter ``column`` at ``t``, interpolated between the samples around it (0
        before the first: the process had not started; the last after the last: it ended)."""
        i = bisect_right([s[0] for s in series], t)
        if i == 0:
            return 0.0
        if i == len(series):
            return series[-1][column]
        (t0, *a), (t1, *b) = series[i - 1], series[i]
        share = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
        return a[column - 1] + share * (b[column - 1] - a[column - 1])

    def between(self, t0: float, t1: float) -> tuple[float, float, float]:
        """(CPU s, run-queue wait s, machine busy CPU s) of the window ``t0..t1``."""
        cpu = runq = 0.0
        for series in self._series.values():
            cpu += self._at(series, t1, 1) - self._at(series, t0, 1)
            runq += self._at(series, t1, 2) - self._at(series, t0, 2)
        machine = self._at(self._machine, t1, 1) - self._at(self._machine, t0, 1)
        return cpu, runq, machine


@dataclass
class Trace:
    """The moments of one launch's nodes (epoch seconds; absent: not reached or not known)."""

    nodes: int
    began: float
    moments: dict[int, dict[str, float]] = field(default_factory=dict)
    #: the run's RUNNING transition (the controller's ``run.started``)
    running: float | None = None

    def set(self, rank: int, name: str, ts: float) -> None:
        self.moments.setdefault(rank, {})[name] = ts

    def phases(self) -> list[tuple[str, float, float]]:
        """``(moment, start, end)`` of each phase of the critical path: from the previous
        phase's end to the last node reaching ``moment`` (never before the previous end)."""
        out = []
        prev = self.began
        for name, _ in MOMENTS:
            seen = [m[name] for m in self.moments.values() if name in m]
            if len(seen) < self.nodes:
                continue
            end = max(prev, max(seen))
            out.append((name, prev, end))
            prev = end
        return out

    def table(self, meter: CpuMeter | None, cores: int) -> list[dict]:
        rows = []
        for name, t0, t1 in self.phases():
            row: dict = {"phase": name, "wall_s": round(t1 - t0, 3)}
            if meter is not None:
                cpu, runq, busy = meter.between(t0, t1)
                wall = max(t1 - t0, 1e-9)
                row.update(
                    cpu_s=round(cpu, 3),
                    runq_s=round(runq, 3),
                    busy_cpus=round(min(busy / wall, cores), 2),
                    # at least this long none of the benchmark's processes ran or waited
                    # for a CPU (each second one of them did adds a second to cpu + runq)
                    wait_s=round(max(0.0, wall - cpu - runq), 3),
                )
            rows.append(row)
        return rows

    def per_node(self) -> dict[int, dict[str, float]]:
        return {
            rank: {name: round(ts - self.began, 3) for name, ts in sorted(m.items(), key=_by)}
            for rank, m in sorted(self.moments.items())
        }


def _by(item: tuple[str, float]) -> float:
    return item[1]


#: a gang member's resource key ends ``-a<attempt>-k<rank>`` (the head's: ``-a<attempt>``)
_MEMBER = re.compile(r"-a\d+-k(\d+)$")

_TORCHRUN = {
    "torchrun": re.compile(r"Starting elastic_operator"),
    "rendezvous": re.compile(r"Rendezvous complete"),
}


def _agent_moments(trace: Trace, rank: int, agent_dir: Path, stage: str) -> None:
    try:
        started = json.loads((agent_dir / "agent.json").read_text()).get("started_at")
    except (OSError, ValueError):
        started = None
    if started:
        trace.set(rank, "agent_up", _iso(started))
    try:
        lines = (agent_dir / "events.jsonl").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        kind, ts = event.get("type"), _iso(event["ts"])
        if kind == "attempt.started":
            trace.set(rank, "agent_up", min(ts, trace.moments.get(rank, {}).get("agent_up", ts)))
        elif kind == "gang.started":
            trace.set(rank, "gang_start", ts)
        elif kind == "code.ready":
            trace.set(rank, "code", ts)
        elif kind == "stage.started" and event.get("stage") == stage:
            trace.set(rank, "stage", ts)
    try:
        log = (agent_dir / "logs" / f"{stage}.log").read_text(errors="replace").splitlines()
    except OSError:
        log = []
    for line in log:
        for name, pattern in _TORCHRUN.items():
            if name not in trace.moments.get(rank, {}) and pattern.search(line):
                trace.set(rank, name, _iso(line.split(" ", 1)[0]))


def collect(
    home: Path, run_id: str, attempt: int, nodes: int, began: float, marks: Path, stage: str
) -> Trace:
    """The trace of attempt ``attempt`` of ``run_id`` on the fake cloud under ``home``
    (its machines still up: a gone machine's disk is deleted)."""
    from corral.providers.common.host_state import Layout as HostLayout
    from corral.providers.fake.state import Layout

    trace = Trace(nodes=nodes, began=began)
    layout = Layout(home)
    for rec in layout.records():
        if rec.run_id != run_id:
            continue
        machine = layout.machine_home(rec.key)
        host = HostLayout(machine)
        agent = host.read(rec.key)
        if agent is None or agent.attempt != attempt:
            continue
        member = _MEMBER.search(rec.key)
        rank = int(member.group(1)) if member else 0
        trace.set(rank, "launch", rec.launched_at)
        trace.set(rank, "agent_proc", agent.create_time)
        _agent_moments(trace, rank, host.agent_dir(rec.key), stage)
    for line in marks.read_text().splitlines():
        parts = line.split()
        if len(parts) != 4 or int(parts[1]) != attempt:
            continue
        rank, what = int(parts[2]), parts[3]
        name = "step" if what.isdigit() else what
        if name not in trace.moments.get(rank, {}):
            trace.set(rank, name, float(parts[0]))
    return trace


def render(title: str, rows: list[dict], per_node: dict[int, dict[str, float]]) -> str:
    out = [title]
    out.append(f"  {'phase':<12}{'wall':>7}{'cpu':>7}{'runq':>7}{'busy':>6}{'wait':>7}")
    for r in rows:
        out.append(
            f"  {r['phase']:<12}{r['wall_s']:>7.2f}{r.get('cpu_s', 0):>7.2f}"
            f"{r.get('runq_s', 0):>7.2f}{r.get('busy_cpus', 0):>6.2f}{r.get('wait_s', 0):>7.2f}"
        )
    total = sum(r["wall_s"] for r in rows)
    out.append(f"  {'total':<14}{total:>8.2f}")
    names = [n for n, _ in MOMENTS]
    out.append("  per node (s after launch): " + " ".join(n for n in names))
    for rank, m in per_node.items():
        cells = " ".join(f"{m[n]:.2f}" if n in m else "-" for n in names)
        out.append(f"  node {rank}: {cells}")
    return "\n".join(out)
