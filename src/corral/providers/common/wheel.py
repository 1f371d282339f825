"""corral for machines that lack it: a wheel of this very corral, and where a node gets it.

A machine booted from a user's image (or a stock cloud image) may have no corral, or another
version; the agent must speak this controller's wire version. So the controller ships itself:
:func:`build` writes a pure-Python wheel of the corral it runs (every file of the installed
package but compiled ones: ``corral.sdk._fastcopy`` is optional and is rebuilt nowhere), named
``corral-<version>-py3-none-any.whl`` and cached under ``CORRAL_HOME/wheels/`` by content.

How the wheel reaches the machine (:func:`node_install_env`): the agent's port cannot carry it
(no agent runs yet), and user-data or a pod's environment are far too small (16 KB on EC2), so
it goes through the run's object storage: uploaded once to ``<storage>/_corral/wheels/``, and
the node gets a URL it can read with the standard library alone - a presigned HTTPS URL for
``s3://`` (valid for :data:`URL_TTL_S`), a ``file://`` URL for a path. Without storage the node
installs ``corral==<version>`` from an index (PyPI, or ``CORRAL_NODE_INDEX_URL``): the same
version either way, never another. The node's side is ``node_bootstrap.sh``. Beside the
wheel goes corral's own runtime (:mod:`corral.providers.common.runtime`), which a node prefers:
the agent then needs nothing of the image's python.
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import corral
from corral import __version__

#: how long a presigned URL of the wheel stays valid (7 days, S3's longest)
URL_TTL_S = 7 * 24 * 3600
#: where wheels live inside a storage prefix
STORAGE_DIR = "_corral/wheels"
#: what a node's bootstrap reads (and the agent drops from its environment)
ENV_VERSION = "CORRAL_VERSION"
ENV_WHEEL_URL = "CORRAL_WHEEL_URL"
ENV_WHEEL_SHA256 = "CORRAL_WHEEL_SHA256"
ENV_WHEEL_NAME = "CORRAL_WHEEL_NAME"
ENV_INDEX_URL = "CORRAL_NODE_INDEX_URL"
ENV_INSTALL = "CORRAL_INSTALL"
ENV_RUNTIME_URL = "CORRAL_RUNTIME_URL"
ENV_RUNTIME_SHA256 = "CORRAL_RUNTIME_SHA256"
ENV_RUNTIME_ARCH = "CORRAL_RUNTIME_ARCH"
#: ``0``: ship no runtime (nodes then need python 3.11+ of their own, as before)
ENV_SHIP_RUNTIME = "CORRAL_NODE_RUNTIME"
INSTALL_VARS = (
    ENV_VERSION,
    ENV_WHEEL_URL,
    ENV_WHEEL_SHA256,
    ENV_WHEEL_NAME,
    ENV_INDEX_URL,
    ENV_INSTALL,
    ENV_RUNTIME_URL,
    ENV_RUNTIME_SHA256,
    ENV_RUNTIME_ARCH,
)
#: where runtimes live inside a storage prefix
RUNTIME_DIR = "_corral/runtimes"
_SKIP_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".c", ".o")
#: the extras a node installs with corral (object storage for checkpoints and code)
NODE_EXTRAS = "aws"


@dataclass(frozen=True)
class Wheel:
    path: Path
    sha256: str
    size: int

    @property
    def name(self) -> str:
        return self.path.name


def _package_files(root: Path) -> list[Path]:
    out = []
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(_SKIP_SUFFIXES):
                out.append(Path(top) / name)
    return out


def _metadata() -> str:
    import importlib.metadata  # lazy, as every import of this module: the launch path

    try:
        requires = importlib.metadata.requires("corral") or []
    except importlib.metadata.PackageNotFoundError:
        requires = []
    lines = [
        "Metadata-Version: 2.1",
        "Name: corral",
        f"Version: {__version__}",
        "Summary: corral, shipped by its controller to a machine that lacks it",
        "Requires-Python: >=3.11",
    ]
    extras = sorted(
        {r.split("extra ==")[1].strip().strip("'\"") for r in requires if "extra ==" in r}
    )
    lines += [f"Provides-Extra: {e}" for e in extras]
    lines += [f"Requires-Dist: {r}" for r in requires]
    return "\n".join(lines) + "\n"


def _record_line(name: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def build(cache: Path) -> Wheel:
    """The wheel of the running corral, in ``cache`` (built once per content)."""
    import csv
    import io
    import zipfile

    pkg = Path(corral.__file__).resolve().parent
    files = _package_files(pkg)
    contents: list[tuple[str, bytes]] = []
    for path in files:
        rel = "corral/" + path.relative_to(pkg).as_posix()
        contents.append((rel, path.read_bytes()))
    dist = f"corral-{__version__}.dist-info"
    contents.append((f"{dist}/METADATA", _metadata().encode()))
    contents.append(
        (
            f"{dist}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: corral\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
    )
    contents.append(
        (f"{dist}/entry_points.txt", b"[console_scripts]\ncorral = corral.cli.app:main\n")
    )
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data in contents:
        writer.writerow(_record_line(name, data))
    writer.writerow([f"{dist}/RECORD", "", ""])
    contents.append((f"{dist}/RECORD", record.getvalue().encode()))
    content_id = hashlib.sha256()
    for name, data in contents:
        content_id.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    cache.mkdir(parents=True, exist_ok=True)
    folder = cache / content_id.hexdigest()[:16]
    path = folder / f"corral-{__version__}-py3-none-any.whl"
    if not path.is_file():
        folder.mkdir(exist_ok=True)
        tmp = folder / ".building"
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for name, data in contents:
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, data)
        os.replace(tmp, path)
    data = path.read_bytes()
    return Wheel(path, hashlib.sha256(data).hexdigest(), len(data))


def _url(storage: object, where: str) -> str:
    presign = getattr(storage, "client", None)
    if where.startswith("s3://") and presign is not None:
        bucket, _, key = where[len("s3://") :].partition("/")
        return str(
            presign.generate_presigned_url(
                "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=URL_TTL_S
            )
        )
    return "file://" + where if not where.startswith("file://") else where


def node_install_env(storage_uri: str | None, cache: Path) -> dict[str, str]:
    """What a node's bootstrap needs to run this corral: its version, and (with object
    storage) the URL, name and sha256 of its wheel and of corral's runtime for this arch
    (:mod:`corral.providers.common.runtime`; not with ``CORRAL_NODE_RUNTIME=0``) and for each
    other arch configured (``CORRAL_RUNTIME_URL_AARCH64``, ...), each uploaded there unless
    already there."""
    from corral.bundle.remote import open_storage, put_file  # the storage clients, lazily

    env = {ENV_VERSION: __version__}
    index = os.environ.get(ENV_INDEX_URL)
    if index:
        env[ENV_INDEX_URL] = index
    if not storage_uri:
        return env
    wheel = build(cache)
    base = storage_uri.rstrip("/")
    if "://" not in base:
        base = "file://" + base

    def shipped(path: Path, size: int, uri: str, arch: str | None = None) -> str:
        """Upload ``path`` to ``uri`` unless it is there; a runtime (``arch``) uploaded
        prunes the storage's older runtimes of its arch."""
        storage, where = open_storage(uri, dict(os.environ))
        try:
            there = storage.isfile(where) and storage.size(where) == size
        except FileNotFoundError:
            there = False
        if not there:
            put_file(storage, path, where)
            if arch is not None:
                from corral.providers.common import runtime

                folder = os.path.dirname(os.path.dirname(where))
                runtime.prune_storage(
                    storage, folder, os.path.basename(os.path.dirname(where)), arch
                )
        return _url(storage, where)

    url = shipped(wheel.path, wheel.size, f"{base}/{STORAGE_DIR}/{wheel.sha256[:16]}/{wheel.name}")
    env.update({ENV_WHEEL_URL: url, ENV_WHEEL_SHA256: wheel.sha256, ENV_WHEEL_NAME: wheel.name})
    if os.environ.get(ENV_SHIP_RUNTIME, "1") != "0":
        from corral.providers.common import runtime  # packs once per machine (cached)

        rt = runtime.build(wheel.path)
        uri = f"{base}/{RUNTIME_DIR}/{rt.sha256[:16]}/{rt.name}"
        env.update(
            {
                ENV_RUNTIME_URL: shipped(rt.path, rt.size, uri, rt.arch),
                ENV_RUNTIME_SHA256: rt.sha256,
                ENV_RUNTIME_ARCH: rt.arch,
            }
        )
        for arch in runtime.foreign_arches():  # the node picks its own by `uname -m`
            other = runtime.build(wheel.path, arch=arch)
            uri = f"{base}/{RUNTIME_DIR}/{other.sha256[:16]}/{other.name}"
            url = shipped(other.path, other.size, uri, arch)
            env[runtime.arch_env(ENV_RUNTIME_URL, arch)] = url
            env[runtime.arch_env(ENV_RUNTIME_SHA256, arch)] = other.sha256
    return env


def bootstrap_script() -> str:
    """The node's bootstrap (``node_bootstrap.sh``): make sure this corral runs there, then
    run the command it is given with that python. Without its comment lines (the shebang
    kept): it travels in EC2 user-data (16 KB in all) and in a container's environment."""
    lines = (Path(__file__).with_name("node_bootstrap.sh")).read_text().splitlines()
    kept = [x for i, x in enumerate(lines) if i == 0 or not x.lstrip().startswith("#")]
    return "\n".join(kept) + "\n"


def start_script(install_command: str | None = None) -> str:
    """What a container runs first: the node bootstrap (:func:`bootstrap_script`), preceded
    by ``install_command`` when set (an advanced override, run only when the image's python
    lacks corral)."""
    legacy = ""
    if install_command:
        legacy = (
            'PY0="$(command -v python3 || command -v python || true)"\n'
            '"$PY0" -c "import corral" 2>/dev/null || '
            f'{{ echo "corral: installing corral (install_command)" >&2; {install_command}; }}\n'
        )
    return legacy + bootstrap_script()
