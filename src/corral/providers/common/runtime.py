"""corral's own runtime for a machine: an interpreter and every package the agent imports,
packed once by the controller, unpacked beside the image's environment and never into it.

A machine's image may have no Python, an old one (Ubuntu 22.04's 3.10), a conda one or a
current one; the agent needs CPython 3.11+ and corral's dependencies at the versions the
controller runs. :func:`build` packs, into one ``.tar.gz`` named by its content:

- ``python/``: a CPython 3.11+ tree (``bin/``, the standard library, ``libpython`` when the
  build is shared, with its run path rewritten to ``$ORIGIN/../lib`` so the tree runs from any
  directory). Its source is ``CORRAL_NODE_PYTHON_DIST`` (a python-build-standalone
  ``install_only`` archive: portable to any glibc Linux of its arch) or, without it, the
  interpreter the controller itself runs on (portable to machines of the same distribution);
- ``python/lib/python3.X/site-packages/``: corral's dependencies (with the node extras) copied
  from the controller's own environment, so the versions are the tested ones and no index is
  needed; a ``.pth`` puts ``sdk/`` after them;
- ``sdk/``: corral itself (pure Python, from :func:`corral.providers.common.wheel.build`), what
  a job's own interpreter gets on its ``PYTHONPATH`` (after the image's entries), and in
  ``sdk/corral-sdk-deps`` the packages the SDK imports (pydantic, tenacity), which ``import
  corral`` puts *after* the job's site-packages: what the image has wins, nothing is replaced;
- ``RUNTIME.json``: corral's version, the arch, the Python version.

Another arch than the controller's (``aarch64`` on an x86_64 controller, say) is packed from
``CORRAL_NODE_PYTHON_DIST_<ARCH>`` (an ``install_only`` archive of that arch: see
``scripts/aarch64_python.sh``) and, for the dependencies with compiled parts, that arch's
wheels at the controller's versions (:func:`arch_wheels`: from ``CORRAL_NODE_WHEELS_<ARCH>``,
else ``pip download --platform manylinux..._<arch>`` into the cache); pure-Python ones are
copied as for the controller's arch. The bootstrap picks the runtime of its ``uname -m``.

The archive is cached under :func:`cache_dir` (``CORRAL_RUNTIME_CACHE``, default
``~/.cache/corral/runtimes``) by the content of what went in, and shipped like the wheel
(``node_install_env`` in :mod:`corral.providers.common.wheel`). The node's side is
``node_bootstrap.sh``."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral import __version__
from corral.errors import BadInput

ENV_DIST = "CORRAL_NODE_PYTHON_DIST"
ENV_CACHE = "CORRAL_RUNTIME_CACHE"
#: a folder of wheels of another arch (``CORRAL_NODE_WHEELS_AARCH64``)
ENV_WHEELS = "CORRAL_NODE_WHEELS"
#: the arches a runtime can be packed for, and the wheel platforms each takes
PLATFORMS = {
    "x86_64": ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64"),
    "aarch64": ("manylinux2014_aarch64", "manylinux_2_17_aarch64", "manylinux_2_28_aarch64"),
}
#: the packages of the standard library a node never needs (tests, GUIs, the installer)
_STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages"}
#: the packages ``corral.sdk`` imports besides the standard library: in ``sdk/corral-sdk-deps``,
#: which a job's python puts after its own site-packages (``corral/__init__.py``)
SDK_PACKAGES = (
    "tenacity",
    "pydantic",
    "pydantic-core",
    "typing-extensions",
    "annotated-types",
    "typing-inspection",
)
SDK_DEPS = "corral-sdk-deps"
#: corral's dependencies that only the controller's side imports (the store: the node side
#: never imports it, an import contract in pyproject.toml says so)
CONTROLLER_ONLY = frozenset({"sqlalchemy", "alembic"})
#: runtimes of one arch kept in the controller's cache and in a storage (the newest): the
#: current one and the two before it, so a controller upgraded and rolled back, or a checkout
#: beside an installed corral, neither packs (20 s) nor uploads (45 MB) again; older ones are
#: dead weight (45 MB each, as many as versions and dependency changes)
KEEP = 3
#: the storage's list of the runtimes shipped there, oldest first (what :func:`prune_storage`
#: may delete: a runtime not in it is left alone)
STORAGE_INDEX = "index.json"
#: the marker file at the top of an unpacked runtime
MARKER = "RUNTIME.json"
TOP = "corral-runtime"


@dataclass(frozen=True)
class Runtime:
    path: Path
    sha256: str
    size: int
    arch: str

    @property
    def name(self) -> str:
        return self.path.name


def cache_dir(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get(ENV_CACHE):
        return Path(env[ENV_CACHE])
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "corral" / "runtimes"


def machine_arch() -> str:
    """This machine's arch as ``uname -m`` says it (``x86_64``, ``aarch64``)."""
    return platform.machine()


def arch_env(name: str, arch: str) -> str:
    """The variable ``name`` for ``arch`` (``CORRAL_NODE_PYTHON_DIST_AARCH64``)."""
    return f"{name}_{arch.upper()}"


def foreign_arches(environ: dict[str, str] | None = None) -> list[str]:
    """The arches other than this machine's that a runtime is packed for: those with a
    ``CORRAL_NODE_PYTHON_DIST_<ARCH>``."""
    env = os.environ if environ is None else environ
    return [a for a in PLATFORMS if a != machine_arch() and env.get(arch_env(ENV_DIST, a))]


def _compiled(dist: importlib.metadata.Distribution) -> bool:
    """Whether the distribution has compiled parts (a wheel of its own per arch)."""
    return any(".so" in Path(str(f)).name for f in dist.files or [])


def _key(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _wheel_for(wheelhouse: Path, dist: importlib.metadata.Distribution, arch: str) -> Path | None:
    """The wheel of ``dist``'s name and version for ``arch`` in ``wheelhouse``, if there."""
    want = (_key(str(dist.metadata["Name"])), dist.version)
    for path in sorted(wheelhouse.glob("*.whl")) if wheelhouse.is_dir() else []:
        parts = path.name[: -len(".whl")].split("-")
        if len(parts) >= 5 and (_key(parts[0]), parts[1]) == want and arch in parts[-1]:
            return path
    return None


def arch_wheels(
    arch: str, wheelhouse: Path | None = None, *, extras: tuple[str, ...] = ("aws",)
) -> dict[str, Path]:
    """Distribution key -> the ``arch`` wheel of each of corral's dependencies with compiled
    parts, at the versions installed here: found in ``wheelhouse`` (default
    ``CORRAL_NODE_WHEELS_<ARCH>``, else the cache's ``wheels-<arch>``), the missing ones
    fetched there with ``pip download --platform ... --only-binary=:all:``. :class:`BadInput`
    when pip cannot get one."""
    import subprocess

    if arch not in PLATFORMS:
        raise BadInput(f"cannot pack corral's runtime for {arch!r}: one of {', '.join(PLATFORMS)}")
    if wheelhouse is None:
        named = os.environ.get(arch_env(ENV_WHEELS, arch))
        wheelhouse = Path(named) if named else cache_dir() / f"wheels-{arch}"
    needed = [d for d in _closure(extras) if _compiled(d)]
    missing = [d for d in needed if _wheel_for(wheelhouse, d, arch) is None]
    if missing:
        wheelhouse.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
        argv += [
            "--only-binary=:all:",
            "--python-version",
            f"{sys.version_info[0]}.{sys.version_info[1]}",
        ]
        argv += ["--implementation", "cp", "--dest", str(wheelhouse)]
        for platform_tag in PLATFORMS[arch]:
            argv += ["--platform", platform_tag]
        argv += [f"{d.metadata['Name']}=={d.version}" for d in missing]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise BadInput(f"cannot get the {arch} wheels of corral's runtime: {last}")
    out: dict[str, Path] = {}
    for dist in needed:
        found = _wheel_for(wheelhouse, dist, arch)
        if found is None:
            raise BadInput(
                f"cannot pack corral's runtime for {arch}: no {arch} wheel of "
                f"{dist.metadata['Name']}=={dist.version} in {wheelhouse}"
            )
        out[_key(str(dist.metadata["Name"]))] = found
    return out


def _wheel_files(wheel: Path) -> list[tuple[str, bytes, int]]:
    """(path in site-packages, content, mode) of a wheel's files (its ``.data`` purelib and
    platlib folded in; scripts, headers and data left out)."""
    out = []
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            if name.endswith("/"):
                continue
            top, _, rest = name.partition("/")
            if top.endswith(".data"):
                kind, _, inner = rest.partition("/")
                if kind not in ("purelib", "platlib"):
                    continue
                name = inner
            mode = (info.external_attr >> 16) & 0o755 or 0o644
            out.append((name, zf.read(info), mode | 0o644))
    return out


def _closure(extras: tuple[str, ...]) -> list[importlib.metadata.Distribution]:
    """The installed distributions corral needs (with ``extras``), corral itself excluded."""
    import importlib

    try:  # packaging is no dependency of corral's; pip vendors it where packaging is absent
        requirements = importlib.import_module("packaging.requirements")
    except ImportError:  # pragma: no cover - the dev environment has packaging
        requirements = importlib.import_module("pip._vendor.packaging.requirements")
    Requirement = requirements.Requirement

    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = [(r, tuple(extras)) for r in importlib.metadata.requires("corral") or []]
    while todo:
        text, wanted = todo.pop()
        req = Requirement(text)
        if req.marker is not None and not any(
            req.marker.evaluate({"extra": e}) for e in (wanted or ("",))
        ):
            continue
        key = req.name.lower().replace("_", "-")
        if key in seen or key == "corral" or key in CONTROLLER_ONLY:
            continue
        try:
            dist = importlib.metadata.distribution(req.name)
        except importlib.metadata.PackageNotFoundError:
            if req.marker is not None and "extra" in str(req.marker) and wanted == extras:
                continue  # an extra of corral's this controller lacks: the node lacks it too
            raise BadInput(
                f"cannot pack corral's runtime: {req.name} is not installed here"
            ) from None
        seen[key] = dist
        todo += [(r, tuple(req.extras)) for r in dist.requires or []]
    return [seen[k] for k in sorted(seen)]


def _dist_files(dist: importlib.metadata.Distribution) -> list[tuple[str, Path]]:
    out = []
    for f in dist.files or []:
        rel = f.as_posix()
        if rel.startswith(("..", "/")) or "__pycache__" in rel or rel.endswith(".pyc"):
            continue  # scripts in bin/ and compiled caches: not needed, rebuilt on the node
        path = Path(str(dist.locate_file(f)))
        if path.is_file():
            out.append((rel, path))
    return out


def _interpreter_tree(
    dist_archive: Path | None, scratch: Path, env_name: str = ENV_DIST
) -> tuple[Path, str]:
    """The CPython tree to pack (a directory with ``bin/`` and ``lib/``; an archive is
    unpacked in ``scratch``) and its X.Y version."""
    if dist_archive is None:
        return Path(sys.base_prefix), f"{sys.version_info[0]}.{sys.version_info[1]}"
    try:
        with tarfile.open(dist_archive) as tf:
            tf.extractall(scratch, filter="tar")
    except (tarfile.TarError, OSError) as exc:
        raise BadInput(f"{env_name}: {dist_archive.name} cannot be unpacked ({exc})") from None
    tree = scratch / "python" if (scratch / "python").is_dir() else scratch
    libs = sorted((tree / "lib").glob("python3.*/os.py"))
    if not (tree / "bin").is_dir() or not libs:
        raise BadInput(f"{env_name}: {dist_archive.name} is not a CPython install tree")
    return tree, libs[0].parent.name.removeprefix("python")


def _relocatable(data: bytes, libdir: str) -> bytes:
    """An ELF file whose run path names ``libdir`` gets ``$ORIGIN/../lib`` instead (padded
    with NULs to the same length), so it finds its ``libpython`` wherever it is unpacked."""
    old = libdir.encode() + b"\0"
    new = b"$ORIGIN/../lib"
    if old not in data or len(new) + 1 > len(old):
        return data
    return data.replace(old, new.ljust(len(old), b"\0"))


def _stripped(data: bytes) -> bytes:
    """A shared library without its debugging symbols (``strip``, where this machine has it)."""
    import shutil
    import subprocess

    tool = shutil.which("strip")
    if tool is None:
        return data
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lib.so"
        path.write_bytes(data)
        done = subprocess.run([tool, "--strip-unneeded", str(path)], capture_output=True)
        return path.read_bytes() if done.returncode == 0 else data


def _add(tf: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    import io

    info = tarfile.TarInfo(f"{TOP}/{name}")
    info.size, info.mode, info.mtime = len(data), mode, 0
    tf.addfile(info, io.BytesIO(data))


def _add_tree(tf: tarfile.TarFile, src: Path, arc: str, skip: set[str]) -> None:
    for top, dirs, files in os.walk(src):
        dirs[:] = sorted(
            d for d in dirs if d not in skip and d != "__pycache__" and not d.startswith("config-")
        )
        rel = Path(top).relative_to(src)
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = Path(top) / name
            arcname = f"{TOP}/{arc}/{(rel / name).as_posix()}"
            if path.is_symlink():
                info = tarfile.TarInfo(arcname)
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
                tf.addfile(info)
            else:
                tf.add(path, arcname, recursive=False)


def _pack(
    out: Path,
    tree: Path,
    pyver: str,
    corral_wheel: Path,
    extras: tuple[str, ...],
    arch: str,
    wheels: dict[str, Path],
) -> None:
    lib = f"lib/python{pyver}"
    own = tree == Path(sys.base_prefix)
    libdir = str(sysconfig.get_config_var("LIBDIR") or "") if own else ""
    import gzip

    # no time in the gzip header: the same content packs to the same bytes (and sha256)
    with (
        open(out, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w") as tf,
    ):
        binaries = sorted((tree / "bin").glob("python3*")) + sorted(
            (tree / "lib").glob("libpython3*.so*")
        )
        for exe in binaries:
            arc = f"{TOP}/python/{exe.parent.name}/{exe.name}"
            if exe.name.endswith("-config"):
                continue
            if exe.is_symlink():
                info = tarfile.TarInfo(arc)
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(exe)
                tf.addfile(info)
            else:
                data = exe.read_bytes()
                relocated = exe.parent.name == "bin"
                data = _relocatable(data, libdir) if relocated else _stripped(data)
                _add(tf, arc.removeprefix(f"{TOP}/"), data, 0o755)
        stdlib = tree / lib if not own else Path(sysconfig.get_paths()["stdlib"])
        _add_tree(tf, stdlib, f"python/{lib}", _STDLIB_SKIP)
        dynload = Path(sysconfig.get_paths()["platstdlib"]) / "lib-dynload"
        if own and not (stdlib / "lib-dynload").is_dir() and dynload.is_dir():
            _add_tree(tf, dynload, f"python/{lib}/lib-dynload", set())
        site = f"python/{lib}/site-packages"
        sdk_names = {n.lower() for n in SDK_PACKAGES}
        for dist in _closure(extras):
            name = str(dist.metadata["Name"]).lower().replace("_", "-")
            target = f"sdk/{SDK_DEPS}" if name in sdk_names else site
            wheel = wheels.get(_key(name))
            if wheel is not None:  # another arch's build of a compiled package
                for rel, data, mode in _wheel_files(wheel):
                    _add(tf, f"{target}/{rel}", data, mode)
                continue
            for rel, path in _dist_files(dist):
                _add(tf, f"{target}/{rel}", path.read_bytes(), path.stat().st_mode & 0o755 | 0o644)
        with zipfile.ZipFile(corral_wheel) as zf:
            for name in zf.namelist():
                if not name.endswith("/"):
                    _add(tf, f"sdk/{name}", zf.read(name))
        # a Debian-built python (its site module frozen in) looks in lib/python3/dist-packages
        link = tarfile.TarInfo(f"{TOP}/python/lib/python3/dist-packages")
        link.type, link.linkname = tarfile.SYMTYPE, f"../python{pyver}/site-packages"
        tf.addfile(link)
        _add(
            tf,
            f"{site}/corral-runtime.pth",
            f"../../../../sdk\n../../../../sdk/{SDK_DEPS}\n".encode(),
        )
        marker = {"corral": __version__, "arch": arch, "python": pyver}
        _add(tf, MARKER, json.dumps(marker, sort_keys=True).encode() + b"\n")


def build(
    corral_wheel: Path,
    cache: Path | None = None,
    *,
    extras: tuple[str, ...] = ("aws",),
    arch: str | None = None,
) -> Runtime:
    """corral's runtime for machines of ``arch`` (default: this machine's; see the module
    doc), in ``cache``: packed once per content (this corral's wheel, the interpreter, the
    dependencies' versions). :class:`BadInput` for an interpreter that cannot serve
    (``CORRAL_NODE_PYTHON_DIST`` missing, not CPython, older than 3.11 or not the controller's
    minor version; another arch without its ``CORRAL_NODE_PYTHON_DIST_<ARCH>``) or another
    arch's wheels that cannot be had."""
    cache = cache_dir() if cache is None else cache
    arch = machine_arch() if arch is None else arch
    foreign = arch != machine_arch()
    env_name = arch_env(ENV_DIST, arch) if foreign else ENV_DIST
    source = os.environ.get(env_name)
    if foreign and not source:
        raise BadInput(
            f"{env_name} is not set: corral's runtime for {arch} needs a CPython "
            f"{sys.version_info[0]}.{sys.version_info[1]} of that arch (scripts/aarch64_python.sh)"
        )
    archive = Path(source).expanduser() if source else None
    if archive is not None and not archive.is_file():
        raise BadInput(f"{env_name}: no such file: {archive}")
    wheels = arch_wheels(arch, extras=extras) if foreign else {}
    if archive is None:
        interpreter = sys.base_prefix
    else:
        st = archive.stat()
        interpreter = f"{archive.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    key = hashlib.sha256()
    key.update(f"{__version__}\0{arch}\0{interpreter}\0".encode())
    key.update(hashlib.sha256(corral_wheel.read_bytes()).digest())
    for name in sorted(wheels):
        key.update(f"{wheels[name].name}\0".encode())
    for dist in _closure(extras):
        key.update(f"{dist.metadata['Name']}=={dist.version}\0".encode())
    folder = cache / key.hexdigest()[:16]
    path = folder / f"corral-runtime-{__version__}-{arch}.tar.gz"
    digest_file = folder / "sha256"
    if path.is_file() and digest_file.is_file():
        os.utime(path)  # used now: the newest for the pruning
    else:
        with tempfile.TemporaryDirectory(prefix="corral-runtime-") as scratch:
            tree, pyver = _interpreter_tree(archive, Path(scratch), env_name)
            major, minor = (int(x) for x in pyver.split("."))
            if (major, minor) < (3, 11):
                raise BadInput(f"{env_name}: python {pyver} is older than 3.11")
            if (major, minor) != sys.version_info[:2]:
                raise BadInput(
                    f"{env_name}: python {pyver} is not the controller's "
                    f"{sys.version_info[0]}.{sys.version_info[1]} (its packages are copied "
                    "from this environment)"
                )
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".building-{os.getpid()}"
            _pack(tmp, tree, pyver, corral_wheel, extras, arch, wheels)
        digest_file.write_text(hashlib.sha256(tmp.read_bytes()).hexdigest())
        os.replace(tmp, path)
        prune_cache(cache, arch)
    return Runtime(path, digest_file.read_text().strip(), path.stat().st_size, arch)


def prune_cache(cache: Path, arch: str, keep: int = KEEP) -> list[Path]:
    """Delete all but the ``keep`` newest (last packed or used) runtimes of ``arch`` from the
    controller's ``cache``; the folders deleted."""
    import shutil

    archives = [
        (p.stat().st_mtime_ns, p.parent)
        for p in cache.glob(f"*/corral-runtime-*-{arch}.tar.gz")
        if p.is_file()
    ]
    gone = [folder for _, folder in sorted(archives, reverse=True)[keep:]]
    for folder in gone:
        shutil.rmtree(folder, ignore_errors=True)
    return gone


def prune_storage(
    storage: Any, folder: str, shipped: str, arch: str, keep: int = KEEP
) -> list[str]:
    """Note ``shipped`` (the folder name of a runtime of ``arch`` just uploaded under
    ``folder``, the storage's runtimes) as the newest in the storage's index, and delete the
    runtimes of ``arch`` the index lists beyond the ``keep`` newest; their folder names. A
    runtime shipped by a controller that keeps no index is never deleted."""
    index = storage.join(folder, STORAGE_INDEX)
    try:
        listed = json.loads(storage.read_bytes(index)) if storage.isfile(index) else []
    except (ValueError, FileNotFoundError):
        listed = []
    entries = [
        e
        for e in listed
        if isinstance(e, dict) and isinstance(e.get("id"), str) and e["id"] != shipped
    ]
    entries.append({"id": shipped, "arch": arch})
    mine = [e for e in entries if e.get("arch") == arch]
    gone = [e["id"] for e in mine[: max(0, len(mine) - keep)]]
    for name in gone:
        storage.rmtree(storage.join(folder, name))
    kept = [e for e in entries if e["id"] not in gone]
    storage.write_bytes(index, json.dumps(kept, indent=1).encode() + b"\n")
    return gone
