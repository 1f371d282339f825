"""``corral download RUN [PATH...]``: a run's results on this machine, checked against their
manifest (sha256 and size of every file).

Where from: while the run has a machine, its agent's packaged results
(``GET /artifacts/results.tar.gz``, built when an attempt ends); otherwise, or when the agent
has not packaged them yet, the run's artifact storage (``artifacts.storage``:
``<storage>/<run_id>/manifest.json`` and ``.../artifacts/<path>``). What: without paths, the
results archive (``<dest>/<run_id>-results.tar.gz``: ``manifest.json`` and
``artifacts/<path>``, the agent's layout, built here from storage when it comes from there);
with paths (a file, or a directory for every file under it, as the manifest names them), those
files under ``dest``. A file already there with other contents is kept unless ``force``.
Audited in the run's events (``artifacts.downloaded``: who, from where, what).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import IO, Any, Literal

from corral.errors import AgentError, BadInput, Conflict, NotFound
from corral.service._store import using
from corral.service.artifacts import Located, locate
from corral.service.node import audit, default_actor, live_agent, run_redactor
from corral.service.views import View
from corral.store import RunRecord, Store

RESULTS = "results.tar.gz"
MANIFEST = "manifest.json"
CHUNK = 1024 * 1024


class DownloadedFile(View):
    path: str
    size: int
    sha256: str


class Download(View):
    """What was written: the archive (no paths asked) or the files, from which source."""

    run_id: str
    source: Literal["agent", "storage"]
    archive: str | None
    directory: str
    files: list[DownloadedFile]
    bytes: int


def _safe(path: str) -> str:
    """A manifest path as a relative POSIX path inside the results (BadInput otherwise)."""
    norm = posixpath.normpath(path)
    if (
        not path
        or path.startswith("/")
        or "\\" in path
        or norm.startswith("../")
        or norm in ("..", ".")
        or "\x00" in path
    ):
        raise BadInput(f"the manifest names an unsafe path {path!r}: refusing to write it")
    return norm


def select(files: dict[str, Any], wanted: Sequence[str], run_id: str) -> dict[str, dict]:
    """The manifest's entries ``wanted`` names (all of them for none): each a file, or a
    directory standing for every file under it. NotFound for a name matching nothing."""
    entries = {_safe(p): e for p, e in files.items() if isinstance(e, dict)}
    if not wanted:
        return entries
    out: dict[str, dict] = {}
    for raw in wanted:
        name = posixpath.normpath(raw.strip().removeprefix("./")).rstrip("/")
        hit = {p: e for p, e in entries.items() if p == name or p.startswith(name + "/")}
        if not hit:
            known = ", ".join(sorted(entries)[:8]) or "no files"
            raise NotFound(f"run {run_id} has no artifact {raw!r} (its manifest lists: {known})")
        out.update(hit)
    return out


Progress = Callable[[int, "int | None"], None]


def _copy_checked(
    src: IO[bytes], dest: Path, entry: dict, name: str, progress: Callable[[int], None]
) -> int:
    """Copy ``src`` to ``dest`` (via a temporary file) if its sha256 and size match the
    manifest's ``entry``; BadInput (nothing written) if they do not."""
    digest, size = hashlib.sha256(), 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := src.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
                progress(len(chunk))
        if digest.hexdigest() != entry.get("sha256") or size != entry.get("size"):
            raise BadInput(
                f"{name}: what arrived ({size} bytes) does not match its manifest "
                f"({entry.get('size')} bytes, sha256 {str(entry.get('sha256'))[:12]}...)"
            )
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return size


def _target(dest: Path, path: str, entry: dict, force: bool) -> Path | None:
    """Where ``path`` goes under ``dest``; None when the same file is already there;
    BadInput when another one is (unless ``force``)."""
    target = dest / path
    if target.is_file() and not force:
        with open(target, "rb") as f:
            if hashlib.file_digest(f, "sha256").hexdigest() == entry.get("sha256"):
                return None
        raise BadInput(f"{target} exists with other contents (--force to replace it)")
    return target


class _Source:
    """Where the files come from: ``manifest()`` and ``open(path)``."""

    kind: Literal["agent", "storage"]

    def manifest(self) -> dict[str, Any]:
        raise NotImplementedError

    def open(self, path: str) -> AbstractContextManager[IO[bytes]]:
        raise NotImplementedError


class _Archive(_Source):
    kind = "agent"

    def __init__(self, path: Path):
        self.path = path
        self.tar = tarfile.open(path, "r:gz")  # noqa: SIM115 - closed by the download

    def manifest(self) -> dict[str, Any]:
        with self.open(MANIFEST, inside=False) as f:
            return json.loads(f.read())

    @contextmanager
    def open(self, path: str, inside: bool = True) -> Iterator[IO[bytes]]:
        name = f"artifacts/{path}" if inside else path
        try:
            member = self.tar.getmember(name)
        except KeyError:
            raise BadInput(f"the results archive has no {name}") from None
        f = self.tar.extractfile(member) if member.isfile() else None
        if f is None:
            raise BadInput(f"{name} in the results archive is not a file")
        with f:
            yield f


class _Storage(_Source):
    """The run's files in artifact storage, as :func:`corral.service.artifacts.locate` finds
    them (the manifest the agent reported, else the spec's ``artifacts.storage``)."""

    kind = "storage"

    def __init__(self, found: Located):
        self.found = found

    def manifest(self) -> dict[str, Any]:
        return dict(self.found.view.manifest)

    @contextmanager
    def open(self, path: str) -> Iterator[IO[bytes]]:
        storage = self.found.storage
        f: Any = storage.open_read(storage.join(self.found.root, "artifacts", path))
        try:
            yield f
        finally:
            f.close()


def _from_agent(st: Store, run: RunRecord, part: Path, on_progress: Progress) -> Path | None:
    """The agent's packaged results in ``part``, or None (no machine, not packaged yet)."""
    try:
        agent = live_agent(st, run, ended_ok=True)
    except Conflict:
        return None
    try:
        with open(part, "wb") as f:
            got = agent.download(RESULTS, f, on_progress=on_progress)
    except AgentError:
        got = None
    finally:
        agent.close()
    if got is None:
        part.unlink(missing_ok=True)
        return None
    return part


def download_artifacts(
    ref: str,
    paths: Sequence[str] = (),
    *,
    dest: str | Path = ".",
    force: bool = False,
    actor: str | None = None,
    on_file: Callable[[str, int], None] = lambda _path, _size: None,
    on_progress: Progress = lambda _done, _total: None,
    store: Store | None = None,
) -> Download:
    """Write run ``ref``'s results (or the artifacts ``paths`` name) under ``dest``, checked
    against the manifest. NotFound when there is nothing to download from (no machine and no
    artifact storage, or nothing in storage yet) or a path matches no artifact; BadInput for
    a file that does not match its manifest or would replace another one (without ``force``).
    ``on_file(path, size)`` is told of each file checked; ``on_progress(done, total)`` of the
    bytes fetched so far (the archive from the agent, then the files checked)."""
    dest = Path(dest).expanduser().resolve()
    if dest.exists() and not dest.is_dir():
        raise BadInput(f"--output {dest}: not a directory (downloads go into a directory)")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--output {dest}: {exc.strerror or exc}") from None
    who = actor or default_actor()
    with using(store) as st:
        run = st.get_run(ref)
        redactor = run_redactor(run)
        storage_uri = ((run.spec or {}).get("artifacts") or {}).get("storage")
        part = dest / f".{run.id}-{RESULTS}.part"
        source: _Source | None = None
        got = _from_agent(st, run, part, on_progress) if not run.terminal else None
        if got is not None:
            source = _Archive(got)
        elif storage_uri:
            source = _Storage(locate(run.id, st))
        else:
            state = "is over" if run.terminal else "has no packaged results on its machine yet"
            raise NotFound(
                f"run {run.id} {state} and its spec sets no artifacts.storage: nothing to "
                "download (results are packaged when an attempt ends)"
            )
        try:
            result = _write(run, source, paths, dest, force, on_file, on_progress)
        finally:
            if isinstance(source, _Archive):
                source.tar.close()
            part.unlink(missing_ok=True)
        shown = ", ".join(paths) if paths else "the results archive"
        audit(
            st,
            run,
            "artifacts.downloaded",
            f"{who} downloaded {shown} from the {source.kind} ({len(result.files)} files, "
            f"{result.bytes} bytes)",
            {
                "actor": who,
                "source": source.kind,
                "paths": list(paths),
                "files": len(result.files),
                "bytes": result.bytes,
            },
            redactor,
        )
    return result


def _write(
    run: RunRecord,
    source: _Source,
    paths: Sequence[str],
    dest: Path,
    force: bool,
    on_file: Callable[[str, int], None],
    on_progress: Progress,
) -> Download:
    doc = source.manifest()
    if doc.get("run_id") not in (None, run.id):
        raise BadInput(f"the manifest found is run {doc.get('run_id')}'s, not {run.id}'s")
    chosen = select(doc.get("files") or {}, paths, run.id)
    total = sum(int(e.get("size") or 0) for e in chosen.values())
    done = [0]

    def progress(n: int) -> None:
        done[0] += n
        on_progress(done[0], total)

    files: list[DownloadedFile] = []
    archive: Path | None = None
    if paths:
        for path, entry in sorted(chosen.items()):
            target = _target(dest, path, entry, force)
            if target is not None:
                with source.open(path) as f:
                    _copy_checked(f, target, entry, path, progress)
            files.append(DownloadedFile(path=path, size=entry["size"], sha256=entry["sha256"]))
            on_file(path, int(entry["size"]))
    else:
        archive = dest / f"{run.id}-{RESULTS}"
        if archive.exists() and not force:
            raise BadInput(f"{archive} exists (--force to replace it)")
        with tempfile.TemporaryDirectory(dir=dest, prefix=f".{run.id}-") as tmp:
            work = Path(tmp)
            for path, entry in sorted(chosen.items()):
                with source.open(path) as f:
                    _copy_checked(f, work / "artifacts" / path, entry, path, progress)
                files.append(DownloadedFile(path=path, size=entry["size"], sha256=entry["sha256"]))
                on_file(path, int(entry["size"]))
            if isinstance(source, _Archive):
                shutil.copyfile(source.path, work / RESULTS)  # checked: keep the agent's bytes
            else:
                (work / MANIFEST).write_text(json.dumps(doc, indent=1))
                with tarfile.open(work / RESULTS, "w:gz", compresslevel=1) as tar:
                    tar.add(work / MANIFEST, arcname=MANIFEST, recursive=False)
                    for item in files:
                        tar.add(work / "artifacts" / item.path, arcname=f"artifacts/{item.path}")
            os.replace(work / RESULTS, archive)
    return Download(
        run_id=run.id,
        source=source.kind,
        archive=str(archive) if archive else None,
        directory=str(dest),
        files=files,
        bytes=sum(f.size for f in files),
    )
