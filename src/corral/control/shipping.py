"""The controller's side of getting a run's code to a node that does not share its files.

Once per run (at ``corral launch``, or at the first launch of a run submitted otherwise):

1. what the code is: the workdir (packed, :mod:`corral.bundle`) or a git commit (the spec's
   ref resolved now, so every attempt runs the same one), plus the ``files:`` and, when asked,
   the local changes as a patch. A workdir over ``code.max_size`` is refused here, before any
   machine is rented, with its largest paths.
2. ``code.packed``: an event of the run holding what was packed (sha256, size, source, commit):
   every later attempt ships exactly that, whatever happens to the workdir meanwhile (the
   archive stays in ``CORRAL_HOME/code/``).

At each launch (:func:`code_plan`): with object storage (``code.storage``, else
``checkpoints.storage``) the bundle goes to ``<storage>/_corral/code/<sha256>.tar.gz`` unless it
is already there (``code.uploaded`` says how many bytes went): a recovery sends nothing. The
plan tells the agent where it is. Without storage, or when the agent cannot read it, the agent
waits and the monitor uploads the bundle through the agent's port (:class:`Uploads`,
resumable from what the agent has), off the controller's loop.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral import bundle
from corral.control.node_paths import PACKED, SENT, UPLOADED
from corral.errors import BadInput, CorralError
from corral.secrets import resolve_many
from corral.secrets.keys import KEY_FILE
from corral.secrets.store import STORE_FILE
from corral.spec import JobSpec
from corral.spec.code import MAX_FILE_BYTES
from corral.store.records import RunRecord
from corral.store.store import Store
from corral.wire.code import BundleRef, CodePlan, FileDrop, GitSource, MountPlan
from corral.wire.status import AgentStatus

if TYPE_CHECKING:
    from corral.control.agent_client import AgentClient
    from corral.control.context import Context

log = logging.getLogger("corral.controller")

#: where bundles live inside a storage prefix (run ids never start with "_")
STORAGE_DIR = "_corral/code"
#: bytes of one ``PUT /code`` request
UPLOAD_CHUNK = 64 * 1024 * 1024


def cache_dir(home: Path) -> Path:
    return home / "code"


@dataclass(frozen=True)
class Packed:
    """What a run ships (the data of its ``code.packed`` event)."""

    sha256: str | None
    size: int
    source: str  # "workdir" or "git"
    content_bytes: int = 0
    members: int = 0
    #: the files: {member index: node path, mode}
    files: dict[str, list[Any]] = field(default_factory=dict)
    git_url: str | None = None
    git_ref: str | None = None
    git_commit: str | None = None
    local_commit: str | None = None
    local_dirty: bool | None = None
    warnings: tuple[str, ...] = ()
    cached: bool = False

    def data(self) -> dict[str, Any]:
        return {
            "sha256": self.sha256,
            "size": self.size,
            "source": self.source,
            "content_bytes": self.content_bytes,
            "members": self.members,
            "files": self.files,
            "git": {"url": self.git_url, "ref": self.git_ref, "commit": self.git_commit}
            if self.git_url
            else None,
            "checkout": {"commit": self.local_commit, "dirty": self.local_dirty}
            if self.local_commit
            else None,
            "cached": self.cached,
        }

    @classmethod
    def of(cls, data: dict[str, Any]) -> Packed:
        git = data.get("git") or {}
        local = data.get("checkout") or {}
        return cls(
            sha256=data.get("sha256"),
            size=int(data.get("size") or 0),
            source=str(data.get("source") or "workdir"),
            content_bytes=int(data.get("content_bytes") or 0),
            members=int(data.get("members") or 0),
            files=dict(data.get("files") or {}),
            git_url=git.get("url"),
            git_ref=git.get("ref"),
            git_commit=git.get("commit"),
            local_commit=local.get("commit"),
            local_dirty=local.get("dirty"),
        )


def token_of(spec: JobSpec) -> str | None:
    name = spec.code.token_secret
    return resolve_many([name])[name] if name else None


def check_files(spec: JobSpec, source: str) -> list[tuple[str, str]]:
    """(member index, local path) of each ``files:`` entry; :class:`BadInput` for a missing
    or too large one."""
    files = [(str(i), local_path) for i, local_path in enumerate(spec.files.values())]
    for _, local_path in files:
        try:
            size = Path(local_path).stat().st_size
        except OSError:
            raise BadInput(f"{source}: files: {local_path} does not exist") from None
        if size > MAX_FILE_BYTES:
            raise BadInput(
                f"{source}: files: {local_path} is {size} bytes; files: is for small files "
                f"(at most {MAX_FILE_BYTES // (1024 * 1024)} MB): use mounts: for data"
            )
    return files


#: names of corral's secret files wherever they lie (a home copied by hand, a backup, the
#: temporary files their atomic writes leave behind): never shipped
SECRET_NAMES = (KEY_FILE, STORE_FILE)


class SecretGuard:
    """What a code bundle never holds, wherever the workdir is: corral's home
    (``CORRAL_HOME``: the secret key, the secret store, the database) when it lies inside the
    workdir, and any file named like the secret key or store (or their temporary copies).
    Called for each entry of the workdir's walk; remembers what it left out."""

    def __init__(self, home: Path):
        self._homes = {os.path.realpath(home), os.path.abspath(home)}
        self.left_out: list[str] = []

    def __call__(self, rel: str, path: str, is_dir: bool) -> bool:
        name = os.path.basename(rel)
        secret = any(
            name == n or ((name.startswith(n + ".") or name.startswith(f".{n}.")) and not is_dir)
            for n in SECRET_NAMES
        )
        home = is_dir and (
            os.path.abspath(path) in self._homes or os.path.realpath(path) in self._homes
        )
        if secret or home:
            self.left_out.append(rel + ("/" if is_dir else ""))
        return secret or home

    def warning(self) -> str | None:
        """The line a launch prints when something was left out (None: nothing was)."""
        if not self.left_out:
            return None
        shown = ", ".join(self.left_out[:5]) + (" ..." if len(self.left_out) > 5 else "")
        return (
            f"left out of the code bundle: {shown} (corral's home and secret files never "
            "leave this machine; keep CORRAL_HOME outside the workdir)"
        )


def dirty_warning(toplevel: str, commit: str) -> str:
    return (
        f"{toplevel} has uncommitted changes that the machine will not "
        f"have (it clones {commit[:12]}); commit and push them, or set "
        "code.local_changes: diff"
    )


def pack(
    spec: JobSpec,
    home: Path,
    progress: Callable[[int, int], None] | None = None,
    *,
    source: str = "spec",
) -> Packed:
    """Pack what ``spec`` ships (see the module doc). :class:`BadInput` for a workdir over
    ``code.max_size`` (its largest paths named), a missing file, an unknown git ref."""
    # lazy for start-up speed: a run on this machine packs nothing (tarfile, gzip, subprocess)
    from corral.bundle import git as gitsrc
    from corral.bundle import pack as packing

    code = spec.code
    workdir = str(spec.workdir)
    warnings: list[str] = []
    local = gitsrc.local_state(workdir) if Path(workdir).is_dir() else None
    extra: dict[str, bytes] = {}
    git_commit = None
    if code.git:
        git_commit = gitsrc.resolve(code.git, code.ref, token=token_of(spec))
        if local is not None and local.dirty:
            if code.local_changes == "diff":
                extra[bundle.DIFF_MEMBER] = gitsrc.local_diff(workdir, git_commit)
            elif code.local_changes == "warn":
                warnings.append(dirty_warning(local.toplevel, git_commit))
    files = check_files(spec, source)
    guard = SecretGuard(home)
    items = packing.collect(None if code.git else workdir, files, extra, never=guard)
    left = guard.warning()
    if left:
        warnings.append(left)
    limit = int(code.max_size * 1024**3)
    packing.check_size(items, limit)
    drops = {str(i): [node, 0] for i, node in enumerate(spec.files)}
    sha = None
    size = members = content = 0
    cached = False
    if items:
        packed = packing.pack(cache_dir(home), items, progress)
        sha, size, members, content = (
            packed.sha256,
            packed.size,
            packed.members,
            packed.content_bytes,
        )
        cached = packed.cached
        for i, local_path in files:
            drops[i][1] = Path(local_path).stat().st_mode & 0o7777
    return Packed(
        sha256=sha,
        size=size,
        source="git" if code.git else "workdir",
        content_bytes=content,
        members=members,
        files=drops,
        git_url=code.git,
        git_ref=code.ref,
        git_commit=git_commit,
        local_commit=local.commit if local else None,
        local_dirty=local.dirty if local else None,
        warnings=tuple(warnings),
        cached=cached,
    )


def record(store: Store, run_id: str, packed: Packed) -> None:
    """The ``code.packed`` event of the run (what every attempt ships)."""
    what = (
        f"git {packed.git_url} at {(packed.git_commit or '')[:12]}"
        if packed.source == "git"
        else f"workdir, {packed.members} files, {packed.size} bytes packed"
    )
    if packed.sha256:
        what += f" (sha256 {packed.sha256[:12]})"
    store.add_event(run_id, PACKED, what, data=packed.data())


def packed_of(store: Store, run_id: str) -> Packed | None:
    events = store.events(run_id, types=[PACKED])
    return Packed.of(dict(events[-1].data)) if events else None


def storage_of(spec: JobSpec) -> str | None:
    return spec.code.storage or spec.checkpoints.storage


def bundle_uri(storage: str, sha256: str) -> str:
    base = storage.rstrip("/")
    if "://" not in base:
        base = "file://" + base
    return f"{base}/{STORAGE_DIR}/{sha256}.tar.gz"


def _store_bundle(path: Path, uri: str, size: int, sha256: str, env: dict[str, str]) -> int:
    """Put the bundle at ``uri`` unless it is there with its size. Returns bytes sent."""
    from corral.bundle.remote import open_storage, put_file  # the storage clients, lazily

    storage, where = open_storage(uri, env)
    try:
        if storage.isfile(where) and storage.size(where) == size:
            return 0
    except FileNotFoundError:
        pass
    upload = getattr(storage, "upload_file", None)
    if upload is not None:
        return int(upload(str(path), where, sha256=sha256))
    return put_file(storage, path, where)


def code_plan(
    store: Store,
    run_id: str,
    spec: JobSpec,
    home: Path,
    *,
    attempt: int | None = None,
    inline_max: int = 0,
) -> CodePlan:
    """The ``code`` of a plan for ``run_id``: packed once (the run's ``code.packed``), put in
    object storage when the run has some (unless already there); a bundle of at most
    ``inline_max`` bytes goes in the plan itself (the provider's bootstrap carries it)."""
    from corral.bundle import pack as packing  # lazy: see pack()

    packed = packed_of(store, run_id)
    if packed is None:
        packed = pack(spec, home, source=spec.name)
        record(store, run_id, packed)
    ref = None
    if packed.sha256:
        path = packing.bundle_path(cache_dir(home), packed.sha256)
        storage = storage_of(spec)
        uri = bundle_uri(storage, packed.sha256) if storage else None
        if uri:
            try:
                sent = _store_bundle(path, uri, packed.size, packed.sha256, dict(os.environ))
            except FileNotFoundError:
                sent = -1
            except (CorralError, OSError) as exc:
                why = exc.message if isinstance(exc, CorralError) else str(exc)
                store.add_event(
                    run_id,
                    UPLOADED,
                    f"the code could not go to {uri} ({why}): it goes through the agent",
                    attempt=attempt,
                    data={"uri": uri, "bytes": 0, "error": why},
                )
                uri = None
                sent = 0
            if sent < 0:  # neither the storage nor the cache has it
                uri = None
            elif sent:
                store.add_event(
                    run_id,
                    UPLOADED,
                    f"code bundle uploaded to {uri} ({sent} bytes)",
                    attempt=attempt,
                    data={"uri": uri, "bytes": sent},
                )
        if uri is None and not path.is_file():
            raise BadInput(
                f"the code packed for run {run_id} (sha256 {packed.sha256[:12]}) is no longer "
                f"in {cache_dir(home)} and no storage holds it"
            )
        inline = None
        if packed.size <= inline_max and path.is_file():
            inline = base64.b64encode(path.read_bytes()).decode("ascii")
        ref = BundleRef(
            sha256=packed.sha256,
            size=packed.size,
            storage=uri,
            workdir=packed.source != "git",
            inline=inline,
        )
    git = None
    if packed.git_url and packed.git_commit:
        git = GitSource(
            url=packed.git_url,
            ref=packed.git_ref or "",
            commit=packed.git_commit,
            token_env=spec.code.token_secret,
        )
    return CodePlan(
        bundle=ref,
        git=git,
        files=[
            FileDrop(member=i, path=str(node), mode=int(mode))
            for i, (node, mode) in packed.files.items()
        ],
        mounts=[
            MountPlan(
                source=m.source,
                path=m.path,
                cache=m.cache,
                upload_every_s=m.upload.every if m.upload else None,
                upload_at_end=bool(m.upload and m.upload.at_end),
            )
            for m in spec.mounts
        ],
        source=packed.source,
        local_commit=packed.local_commit,
        local_dirty=packed.local_dirty,
    )


class Uploads:
    """Bundles being uploaded to agents, one thread per attempt, off the controller's loop.

    ``ensure`` starts one when the agent says it waits for its code and none runs; a dropped
    connection ends the thread, and the next ``ensure`` resumes from the bytes the agent has.
    ``finished`` hands over (once) what a completed upload sent.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self._sent: dict[str, int] = {}
        self._done: dict[str, int] = {}

    def ensure(
        self,
        key: str,
        path: Path,
        sha256: str,
        received: int,
        put: Callable[[str, int, bytes], dict[str, Any]],
    ) -> bool:
        """Upload ``path`` from byte ``received`` on with ``put(sha256, offset, data)``.
        False if an upload of ``key`` is running already."""
        with self._lock:
            running = self._threads.get(key)
            if running is not None and running.is_alive():
                return False
            t = threading.Thread(
                target=self._run,
                args=(key, path, sha256, received, put),
                name=f"code-upload-{key}",
                daemon=True,
            )
            self._threads[key] = t
            t.start()
            return True

    def _run(
        self,
        key: str,
        path: Path,
        sha256: str,
        offset: int,
        put: Callable[[str, int, bytes], dict[str, Any]],
    ) -> None:
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                while data := f.read(UPLOAD_CHUNK):
                    put(sha256, offset, data)
                    offset += len(data)
                    with self._lock:
                        self._sent[key] = self._sent.get(key, 0) + len(data)
        except (CorralError, OSError) as exc:
            log.info("code upload %s stopped at byte %d: %s", key, offset, exc)
            return
        with self._lock:
            self._done[key] = self._sent.pop(key, 0)

    def finished(self, key: str) -> int | None:
        """The bytes a finished upload of ``key`` sent in all (once; None otherwise)."""
        with self._lock:
            return self._done.pop(key, None)

    def wait(self, timeout: float | None = None) -> None:
        for t in list(self._threads.values()):
            t.join(timeout)


def upload_step(
    ctx: Context, run: RunRecord, client: AgentClient, status: AgentStatus, node: int = 0
) -> None:
    """Send the bundle to an agent that waits for it (resuming from what it has), and record
    what earlier uploads sent (``node``: the agent's rank in a gang). Never raises: the next
    tick tries again."""
    if ctx.uploads is None:
        ctx.uploads = Uploads()
    uploads: Uploads = ctx.uploads
    key = f"{run.id}:{run.attempt}" + (f":k{node}" if node else "")
    sent = uploads.finished(key)
    if sent:  # (an upload that found everything there already sent nothing: no event)
        ctx.store.add_event(
            run.id,
            SENT,
            f"code bundle sent to the agent ({sent} bytes)" + (f" of node {node}" if node else ""),
            attempt=run.attempt,
            data={"bytes": sent, "to": "agent", **({"node": node} if node else {})},
        )
    code = status.code
    if code is None or code.state != "waiting":
        return
    sha, received = code.sha256, code.received
    if sha is None or received is None:
        return
    if code.size is not None and received >= code.size:
        return  # all there: the agent is verifying it (a look a ring brought saw it waiting)
    path = cache_dir(ctx.home) / f"{sha}.tar.gz"  # corral.bundle.pack.bundle_path
    if not path.is_file():
        log.warning("run %s: the code bundle %s is not in %s", run.id, sha[:12], path.parent)
        return
    uploads.ensure(key, path, sha, received, client.put_code)
