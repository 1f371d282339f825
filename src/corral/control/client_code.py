"""Code that a CLI packs on its own machine for a ``corral server`` that need not see its files
(``corral launch`` with ``CORRAL_SERVER``).

The CLI packs the workdir (with code from git: only the ``files:``) into its own cache with
:func:`pack_on_client`, checks ``code.max_size`` before anything is sent, uploads the bundle
unless the server holds that sha256 already (content-addressed: an unchanged workdir sends
nothing), and submits the run with a :class:`ClientCode` naming it. The server turns that into
the run's ``code.packed`` (:func:`packed_from_client`): from then on the controller ships the
bundle exactly as one it packed itself (:mod:`corral.control.shipping`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from corral.control import shipping
from corral.errors import BadInput
from corral.spec import JobSpec


@dataclass(frozen=True)
class ClientCode:
    """The code a CLI packed on its own machine for a server that need not see its files
    (``corral launch`` with ``CORRAL_SERVER``): the bundle it uploaded (``sha256`` None: code
    from git with no ``files:``, nothing to send), what the bundle holds, and the state of the
    CLI's checkout. ``path`` and ``size`` are the CLI's own (where the bundle lies there)."""

    sha256: str | None
    members: int = 0
    content_bytes: int = 0
    #: the files: {member index: mode}
    modes: dict[str, int] = field(default_factory=dict)
    local_toplevel: str | None = None
    local_commit: str | None = None
    local_dirty: bool | None = None
    #: True when the CLI found it packed already (an unchanged workdir)
    cached: bool = False
    path: Path | None = None
    size: int = 0


def pack_on_client(
    spec: JobSpec,
    home: Path,
    progress: Callable[[int, int], None] | None = None,
    *,
    source: str = "spec",
) -> ClientCode | None:
    """What a CLI sends to a server that need not see its files: the workdir (with code from
    git: only the ``files:``) packed into the CLI's own cache at ``home``, checked against
    ``code.max_size`` before anything is sent. None when the server must pack the code itself:
    code from git with ``local_changes: diff`` (the patch is taken against the commit the
    server resolves, so the server must see the checkout)."""
    from corral.bundle import git as gitsrc  # lazy: see shipping.pack()
    from corral.bundle import pack as packing

    code = spec.code
    if code.git and code.local_changes == "diff":
        return None
    workdir = str(spec.workdir)
    local = gitsrc.local_state(workdir) if Path(workdir).is_dir() else None
    files = shipping.check_files(spec, source)
    items = packing.collect(None if code.git else workdir, files, never=shipping.SecretGuard(home))
    packing.check_size(items, int(code.max_size * 1024**3))
    modes = {i: Path(local_path).stat().st_mode & 0o7777 for i, local_path in files}
    out = ClientCode(
        sha256=None,
        modes=modes,
        local_toplevel=local.toplevel if local else None,
        local_commit=local.commit if local else None,
        local_dirty=local.dirty if local else None,
    )
    if not items:
        return out
    packed = packing.pack(shipping.cache_dir(home), items, progress)
    return replace(
        out,
        sha256=packed.sha256,
        members=packed.members,
        content_bytes=packed.content_bytes,
        cached=packed.cached,
        path=packed.path,
        size=packed.size,
    )


def packed_from_client(
    spec: JobSpec, home: Path, client: ClientCode, source: str
) -> shipping.Packed:
    """The :class:`~corral.control.shipping.Packed` of code a CLI packed and uploaded (see :func:`pack_on_client`)."""
    from corral.bundle import git as gitsrc  # lazy: see shipping.pack()
    from corral.bundle import pack as packing

    code = spec.code
    if code.git and code.local_changes == "diff":
        raise BadInput(
            f"{source}: code.local_changes: diff is packed by the server, which must see "
            "the checkout: launch without an uploaded bundle"
        )
    expected = {str(i) for i in range(len(spec.files))}
    if set(client.modes) != expected:
        raise BadInput(
            f"{source}: files: the code sent holds {len(client.modes)} of them, the spec "
            f"names {len(expected)}"
        )
    if client.sha256 is None and (expected or not code.git):
        raise BadInput(f"{source}: code: no bundle was sent for the workdir")
    size = 0
    if client.sha256 is not None:
        path = packing.bundle_path(shipping.cache_dir(home), client.sha256)
        try:
            size = path.stat().st_size
        except OSError:
            raise BadInput(
                f"{source}: code: the bundle {client.sha256[:12]} is not on the server: upload "
                f"it first (PUT /api/v1/bundles/{client.sha256})"
            ) from None
        # named in the cache's index again: kept among the newest while the run needs it
        packing.keep(path.parent, client.sha256, size, client.members, client.content_bytes)
    warnings: list[str] = []
    git_commit = None
    if code.git:
        git_commit = gitsrc.resolve(code.git, code.ref, token=shipping.token_of(spec))
        if client.local_dirty and code.local_changes == "warn":
            warnings.append(
                shipping.dirty_warning(client.local_toplevel or str(spec.workdir), git_commit)
            )
    return shipping.Packed(
        sha256=client.sha256,
        size=size,
        source="git" if code.git else "workdir",
        content_bytes=client.content_bytes,
        members=client.members,
        files={str(i): [node, client.modes[str(i)]] for i, node in enumerate(spec.files)},
        git_url=code.git,
        git_ref=code.ref,
        git_commit=git_commit,
        local_commit=client.local_commit,
        local_dirty=client.local_dirty,
        warnings=tuple(warnings),
        cached=client.cached,
    )
