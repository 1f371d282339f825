"""The artifacts hook: at the end of every attempt, collect, upload, check and record.

``after_stages`` (for any phase: succeeded, failed, stopped, preempted), in this order:

1. evaluate the acceptance criteria against ``plan.eval.report`` (event ``eval.acceptance``);
2. collect the files ``plan.artifacts.paths`` name (``corral.agent.collect``), plus the eval
   report, and hash them (sha256, size);
3. with ``plan.artifacts.storage``: upload each file to ``<storage>/<run_id>/artifacts/<path>``
   (through the SDK storage protocol, so ``s3://`` works like a local path; a storage's
   optional ``upload_file`` is used when it has one), skipping a file
   the previous manifest in storage already lists with the same sha256 and size; event
   ``artifacts.uploaded``. Before the first changed file is written, a previous manifest is
   removed, so a manifest in storage always describes the files beside it;
4. write ``manifest.json`` (``corral.agent.manifest``) into ``state_dir`` and, last, to
   ``<storage>/<run_id>/manifest.json``; event ``manifest.written``;
5. package ``results.tar.gz`` in the background (``corral.agent.package``), served by
   ``GET /artifacts/results.tar.gz``.

It returns a failure reason (so a succeeded attempt becomes failed) when the upload failed, or
when ``plan.eval.fail_run_on_reject`` is set and the acceptance did not pass.

The modules of that end-of-attempt work (acceptance, collect, manifest, package: tarfile and
hashing) are imported when an attempt ends, not when the agent starts: the agent's path from
its start to the first stage stays short (``benchmarks/launch_overhead.py``).
"""

from __future__ import annotations

import json
import os
import posixpath
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.files import write_json_atomic
from corral.wire.node import EventSink, NodeRunner, iso
from corral.wire.plan import AgentPlan

if TYPE_CHECKING:  # a type only: the module itself is loaded when an upload starts
    from corral.sdk.storage import Storage

MANIFEST = "manifest.json"
CHUNK_BYTES = 8 * 1024 * 1024
UPLOAD_TRIES = 3


class ArtifactsHook:
    name = "artifacts"

    def __init__(
        self,
        plan: AgentPlan,
        events: EventSink,
        *,
        now: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        upload_tries: int | None = None,
        state_dir: str | None = None,
    ):
        self.plan = plan
        self._events = events
        self._now, self._sleep = now, sleep
        self._tries = max(1, UPLOAD_TRIES if upload_tries is None else upload_tries)
        self._lock = threading.Lock()
        self._acceptance: dict[str, Any] | None = None
        self._summary: dict[str, Any] | None = None
        self._packages: dict[str, Path] = {}
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        #: the agent's state directory on this node (the plan's unless the launch said)
        self.state_dir = Path(state_dir or plan.state_dir)

    # --- hook interface --------------------------------------------------------------------

    def before_stages(self, runner: NodeRunner) -> str | None:
        return None

    def after_stages(self, runner: NodeRunner, phase: str) -> str | None:
        from corral.agent import acceptance, manifest  # at the attempt's end (see the top)
        from corral.agent.collect import collect

        plan = self.plan
        problems: list[str] = []
        result = self._evaluate()
        if result is not None and plan.eval.fail_run_on_reject:
            reject = acceptance.rejection(result)
            if reject:
                problems.append(reject)

        found = collect(plan.workdir, plan.artifacts.paths, exclude=[str(self.state_dir)])
        files = dict(found.files)
        report = self._report_file()
        if report is not None:
            files.setdefault(*report)
        entries: dict[str, dict[str, Any]] = {}
        for rel, real in sorted(files.items()):
            try:
                digest, size = manifest.sha256_file(real)
            except OSError as exc:
                found.warnings.append(f"skipped {rel}: {exc.strerror or exc}")
                continue
            entries[rel] = {"size": size, "sha256": digest}
        files = {rel: files[rel] for rel in entries}

        upload = _Upload(plan.artifacts.storage, plan.run_id) if plan.artifacts.storage else None
        upload_error = None
        if upload is not None:
            upload_error = self._guard(lambda: upload.files(files, entries, self._retry))
        status = runner.status()
        doc = manifest.build(
            run_id=plan.run_id,
            run_name=plan.run_name,
            attempt=plan.attempt,
            phase=phase,
            reason=status.get("reason", ""),
            spec_hash=plan.spec_hash,
            created_at=iso(self._now()),
            git=manifest.shipped_git(plan) if plan.code else manifest.git_info(plan.workdir),
            stages=manifest.stage_timings(status["stages"]),
            cost=manifest.cost(
                plan.hourly_price, plan.cost_offset_usd, self._now() - runner.started_at
            ),
            storage=plan.artifacts.storage,
            artifacts_uri=upload.artifacts_root if upload and upload.ready else None,
            files=entries,
            warnings=found.warnings,
            upload_error=upload_error,
            eval=result,
            code=manifest.code_info(plan),
            nodes=plan.nodes,
            node_attempts=manifest.node_history(runner.gang_nodes, plan.attempt, phase),
        )
        local = self.state_dir / MANIFEST
        write_json_atomic(local, doc, mode=0o644)
        manifest_uri = None
        if upload is not None and upload_error is None:
            upload_error = self._guard(lambda: upload.manifest(doc, self._retry))
            if upload_error is None:
                manifest_uri = upload.manifest_path
                nbytes = doc["total_bytes"]
                data = {"uri": upload.artifacts_root, "files": len(entries), "bytes": nbytes}
                data.update(uploaded=upload.uploaded, unchanged=upload.unchanged)
                self._events.emit("artifacts.uploaded", data=data)
        if upload_error is not None:
            problems.insert(0, f"artifacts upload failed: {upload_error}")
            self._events.emit("agent.error", data={"hook": self.name, "message": problems[0]})
        self._events.emit(
            "manifest.written",
            data={"uri": manifest_uri, "path": str(local), "files": len(entries)},
        )
        with self._lock:
            self._summary = {
                "uri": manifest_uri,
                "path": str(local),
                "artifacts_uri": doc["artifacts_uri"],
                "files": len(entries),
                "bytes": doc["total_bytes"],
                "upload_error": upload_error,
                "package": None,
            }
        self._start_package(local, files, {rel: e["size"] for rel, e in entries.items()})
        return "; ".join(problems) or None

    def status(self) -> dict[str, Any]:
        with self._lock:
            summary = dict(self._summary) if self._summary else None
            return {"acceptance": self._acceptance, "manifest": summary}

    def package(self, name: str) -> Path | None:
        """The packaged file called ``name`` once it is built (what ``/artifacts/`` serves)."""
        with self._lock:
            return self._packages.get(name)

    def close(self) -> None:
        self._cancel.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # --- parts -----------------------------------------------------------------------------

    def _evaluate(self) -> dict[str, Any] | None:
        plan = self.plan
        if not plan.eval.report:
            return None
        from corral.agent import acceptance  # at the attempt's end (see the top)

        result = acceptance.evaluate(plan.workdir, plan.eval.report, plan.eval.acceptance)
        with self._lock:
            self._acceptance = result
        self._events.emit("eval.acceptance", data=result)
        return result

    def _report_file(self) -> tuple[str, Path] | None:
        """``(workdir-relative path, real file)`` of the eval report, if it was written."""
        report = self.plan.eval.report
        if not report:
            return None
        work = os.path.realpath(self.plan.workdir)
        real = os.path.realpath(os.path.join(work, report))
        if not real.startswith(work.rstrip(os.sep) + os.sep) or not os.path.isfile(real):
            return None
        return posixpath.normpath(report.replace(os.sep, "/")), Path(real)

    def _retry(self, fn: Callable[[], Any]) -> Any:
        for attempt in range(self._tries):
            try:
                return fn()
            except Exception:
                if attempt == self._tries - 1:
                    raise
                self._sleep(0.5 * 2**attempt)
        return None

    @staticmethod
    def _guard(fn: Callable[[], Any]) -> str | None:
        """Run ``fn``; its failure as one line (None when it worked)."""
        try:
            fn()
        except Exception as exc:
            text = str(exc).splitlines()[0] if str(exc) else ""
            return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        return None

    def _start_package(self, manifest_path: Path, files: dict[str, Path], sizes: dict) -> None:
        from corral.agent.package import RESULTS, PackageCancelled, build_package  # see the top

        def work() -> None:
            try:
                path = build_package(
                    self.state_dir / RESULTS, manifest_path, files, sizes, self._cancel
                )
            except PackageCancelled:
                return
            except Exception as exc:
                message = f"packaging {RESULTS} failed: {type(exc).__name__}: {exc}"
                self._events.emit("agent.error", data={"hook": self.name, "message": message})
                return
            with self._lock:
                self._packages[RESULTS] = path
                if self._summary is not None:
                    self._summary["package"] = RESULTS

        self._thread = threading.Thread(target=work, name="artifacts-package", daemon=True)
        self._thread.start()


class _Upload:
    """Writes one run's artifacts and manifest to ``<storage>/<run_id>/``."""

    def __init__(self, uri: str, run_id: str):
        self.uri, self.run_id = uri, run_id
        self.ready = False
        self.uploaded = self.unchanged = 0
        self.storage: Storage | None = None
        self.root = self.artifacts_root = self.manifest_path = ""

    def _open(self) -> Storage:
        if self.storage is None:
            # lazy for start-up speed: the storage clients load only when something is uploaded
            # (no cycle: corral.sdk never imports corral.agent)
            from corral.sdk.storage import resolve_location

            storage, base = resolve_location(self.uri)
            self.root = storage.join(base, self.run_id)
            self.artifacts_root = storage.join(self.root, "artifacts")
            self.manifest_path = storage.join(self.root, MANIFEST)
            self.storage, self.ready = storage, True
        return self.storage

    def _previous(self, storage: Storage) -> dict[str, Any]:
        try:
            if not storage.isfile(self.manifest_path):
                return {}
            files = json.loads(storage.read_bytes(self.manifest_path)).get("files")
        except (OSError, ValueError, AttributeError):
            return {}
        return files if isinstance(files, dict) else {}

    def files(self, files: dict[str, Path], entries: dict, retry: Callable) -> None:
        storage = self._open()
        previous = self._previous(storage)
        removed_manifest = False
        for rel, real in sorted(files.items()):
            dest = storage.join(self.artifacts_root, *rel.split("/"))
            if self._same(storage, dest, previous.get(rel), entries[rel]):
                self.unchanged += 1
                continue
            if previous and not removed_manifest:
                retry(lambda: storage.remove(self.manifest_path))
                removed_manifest = True
            parent = storage.join(self.artifacts_root, *rel.split("/")[:-1])
            sha = entries[rel]["sha256"]
            retry(lambda d=dest, p=parent, r=real, h=sha: _copy(storage, r, d, p, h))
            self.uploaded += 1

    @staticmethod
    def _same(storage: Storage, dest: str, before: Any, entry: dict) -> bool:
        if not isinstance(before, dict) or before.get("sha256") != entry["sha256"]:
            return False
        try:
            return before.get("size") == entry["size"] == storage.size(dest)
        except OSError:
            return False

    def manifest(self, doc: dict[str, Any], retry: Callable) -> None:
        storage = self._open()
        data = (json.dumps(doc, indent=1) + "\n").encode()
        storage.makedirs(self.root)  # no artifact file may have made it
        retry(lambda: storage.write_bytes(self.manifest_path, data))


def _copy(storage: Storage, src: Path, dest: str, parent: str, sha256: str) -> None:
    """Write ``src`` to ``dest``. A storage with the optional ``upload_file(local, path,
    sha256=)`` (S3: parallel multipart, checked against ``sha256``) does it its own way."""
    storage.makedirs(parent)
    upload_file = getattr(storage, "upload_file", None)
    if upload_file is not None:
        upload_file(str(src), dest, sha256=sha256)
        return
    writer = storage.open_write(dest)
    try:
        with open(src, "rb", buffering=0) as f:
            while chunk := f.read(CHUNK_BYTES):
                writer.write(chunk)
    except BaseException:
        abort = getattr(writer, "abort", None)
        try:
            (abort or writer.close)()
        except Exception:
            pass
        raise
    writer.close()
