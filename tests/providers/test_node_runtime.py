"""corral's own runtime on machines simulated here: the real node bootstrap, a fresh
CORRAL_NODE_HOME, a PATH that holds only what the "image" has (no python at all, a real python
3.10, the current python), the runtime shipped through file:// storage as the controller ships
it. In each, the agent answers /health, a stage's ``python`` is the image's (none at all on the
image without one), and nothing was installed into the image's site-packages."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import httpx
import pytest

from agent.helpers import make_plan
from corral import __version__
from corral.agent.boot import Delivered, delivery_env
from corral.errors import BadInput
from corral.providers.common import runtime, wheel
from support.waiting import wait_until

#: what a minimal image (a CUDA base image, say) has on its PATH, python aside
TOOLS = ("bash", "sh", "env", "cat", "cp", "mv", "rm", "mkdir", "tar", "gzip", "grep", "cut")
TOOLS += ("uname", "sha256sum", "basename", "dirname", "sleep", "ls", "head", "tail", "sed")
#: a real python 3.10 on this machine (pyenv's; see docs/shipping.md)
OLD_PYTHONS = sorted(Path.home().glob(".pyenv/versions/3.10.*/bin/python3.10"))


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The controller's side: the wheel and the runtime (packed once per machine, in
    ~/.cache/corral/runtimes), put in a file:// storage as a launch puts them."""
    storage = tmp_path_factory.mktemp("storage")
    cache = tmp_path_factory.mktemp("wheels")
    return wheel.node_install_env(str(storage), cache)


def _image(tmp: Path, python: Path | None) -> Path:
    """An image's bin folder: the basic tools and, with ``python``, it as python3 and python."""
    bin_dir = tmp / "image" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in TOOLS:
        found = shutil.which(tool, path="/usr/bin:/bin")
        if found:
            (bin_dir / tool).symlink_to(found)
    if python is not None:  # a script, so a venv's python stays in its venv
        for name in ("python3", "python"):
            (bin_dir / name).write_text(f'#!/bin/sh\nexec {python} "$@"\n')
            (bin_dir / name).chmod(0o755)
    return bin_dir


def _site_listing(python: Path | None) -> list[str]:
    if python is None:
        return []
    out = subprocess.run(
        [python, "-c", "import site, sys; print('\\n'.join(site.getsitepackages()))"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=True,
    ).stdout.split()
    return sorted(str(p) for d in out if Path(d).is_dir() for p in Path(d).rglob("*"))


def _boot(tmp: Path, bin_dir: Path, install: dict[str, str]) -> tuple[dict, str]:
    """Boot the simulated machine as a container's entrypoint does; the agent's /health and
    /status once its attempt ended, and the bootstrap's output."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    stages = [
        {
            "name": "which",
            "run": "python -c 'import sys; print(sys.version)' > version.txt || "
            "echo none > version.txt",
        },
        {
            "name": "sdk",
            "run": "python -c 'import corral; print(corral.__file__)' > sdk.txt || true",
        },
    ]
    plan = make_plan(tmp, stages, workdir="/work", state_dir="/state").model_copy(
        update={"controller_timeout_s": None}
    )
    script = tmp / "node-bootstrap.sh"
    script.write_text(wheel.bootstrap_script())
    env = {
        "PATH": str(bin_dir),
        "HOME": str(tmp / "home"),
        "LANG": "C.UTF-8",
        "CORRAL_NODE_HOME": str(tmp / "node"),
        **install,
        **delivery_env(Delivered(plan=plan.model_dump(mode="json"), token="tok-rt")),
        "CORRAL_AGENT_BIND": f"127.0.0.1:{port}",
        "CORRAL_NODE_ROOT": str(tmp / "root"),
    }
    log = tmp / "boot.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(bin_dir / "bash"), str(script)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url, headers = f"http://127.0.0.1:{port}", {"Authorization": "Bearer tok-rt"}
    try:

        def health() -> httpx.Response | None:
            try:
                return httpx.get(f"{url}/health", headers=headers, timeout=2)
            except httpx.HTTPError:
                assert proc.poll() is None, log.read_text()
                return None

        answer = wait_until(health, 120, 0.1, "the agent on corral's runtime").json()

        def ended() -> dict | None:
            got = httpx.get(f"{url}/status", headers=headers, timeout=5).json()
            return got if got["finished_at"] else None

        status = wait_until(ended, 60, 0.2, "the attempt to end")
        exe = os.readlink(f"/proc/{proc.pid}/exe")
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_text().split("\0")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    assert answer["version"] == __version__
    assert status["phase"] == "succeeded", log.read_text()
    return {"exe": exe, "argv": cmdline}, log.read_text()


def _work(tmp: Path) -> Path:
    return tmp / "root" / "work"


def test_the_runtime_is_this_corral_with_a_relocatable_python(shipped: dict[str, str]) -> None:
    path = Path(shipped["CORRAL_RUNTIME_URL"].removeprefix("file://"))
    assert shipped["CORRAL_RUNTIME_ARCH"] == runtime.machine_arch()
    assert path.stat().st_size < 150e6
    with tarfile.open(path) as tf:
        names = set(tf.getnames())
        marker = json.loads(tf.extractfile("corral-runtime/RUNTIME.json").read())  # type: ignore[union-attr]
    assert marker == {"arch": runtime.machine_arch(), "corral": __version__, "python": "3.11"}
    assert "corral-runtime/sdk/corral/agent/main.py" in names
    assert "corral-runtime/sdk/corral-sdk-deps/pydantic/__init__.py" in names
    assert not [n for n in names if "/test/" in n or n.endswith(".pyc")]


def test_no_python_in_the_image(tmp_path: Path, shipped: dict[str, str]) -> None:
    bin_dir = _image(tmp_path, None)
    proc, log = _boot(tmp_path, bin_dir, shipped)
    assert proc["exe"].startswith(str(tmp_path / "node" / "runtimes"))
    assert "runs on its own runtime" in log and "file://" not in log
    # corral's interpreter is not on the stages' PATH: the image has no python, nor do they
    assert (_work(tmp_path) / "version.txt").read_text().strip() == "none"
    assert not [p for p in bin_dir.iterdir() if p.name.startswith("python")]


@pytest.mark.skipif(not OLD_PYTHONS, reason="no python 3.10 on this machine (pyenv)")
def test_an_image_whose_python_is_3_10(tmp_path: Path, shipped: dict[str, str]) -> None:
    old = OLD_PYTHONS[-1]
    before = _site_listing(old)
    bin_dir = _image(tmp_path, old)
    proc, _ = _boot(tmp_path, bin_dir, shipped)
    assert proc["exe"].startswith(str(tmp_path / "node" / "runtimes"))
    assert (_work(tmp_path) / "version.txt").read_text().startswith("3.10.")
    # corral (its version, the SDK's refusal) reaches the job's python after its own paths
    sdk = (_work(tmp_path) / "sdk.txt").read_text().strip()
    assert sdk.startswith(str(tmp_path / "node" / "runtimes")) and sdk.endswith("__init__.py")
    assert _site_listing(old) == before
    done = subprocess.run(
        [str(bin_dir / "python"), "-c", "import corral.sdk"],
        env={"PATH": str(bin_dir), "PYTHONPATH": str(Path(sdk).parent.parent)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "ImportError: corral.sdk needs python 3.11 or later; this job runs python 3.10"
    )


def test_an_image_with_the_current_python(tmp_path: Path, shipped: dict[str, str]) -> None:
    image = tmp_path / "image-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(image)], check=True)
    python = image / "bin" / "python"
    before = _site_listing(python)
    bin_dir = _image(tmp_path, python)
    # the image's own PYTHONPATH holds a pydantic the agent must not see
    theirs = tmp_path / "image-path" / "pydantic"
    theirs.mkdir(parents=True)
    (theirs / "__init__.py").write_text("raise ImportError('the image s own pydantic')\n")
    proc, _ = _boot(tmp_path, bin_dir, {**shipped, "PYTHONPATH": str(theirs.parent)})
    # the image's python lacks corral: the agent runs on the runtime, the job on the image's
    assert proc["exe"].startswith(str(tmp_path / "node" / "runtimes"))
    assert proc["argv"][1:4] == ["-E", "-s", "-m"]  # the agent, after boot's exec: isolated
    version = (_work(tmp_path) / "version.txt").read_text().strip()
    assert version == sys.version.splitlines()[0] or version.startswith(sys.version[:6])
    assert _site_listing(python) == before
    # the SDK imports in the job's python, its packages after the image's own
    sdk_file = (_work(tmp_path) / "sdk.txt").read_text().strip()
    assert sdk_file.startswith(str(tmp_path / "node" / "runtimes")), sdk_file
    sdk = Path(sdk_file).parent.parent
    done = subprocess.run(
        [str(python), "-c", "import corral.sdk, pydantic, sys; print(pydantic.__file__)"],
        env={"PATH": str(bin_dir), "PYTHONPATH": str(sdk)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "corral-sdk-deps" in done.stdout


def test_a_second_boot_reuses_the_unpacked_runtime(tmp_path: Path, shipped: dict) -> None:
    bin_dir = _image(tmp_path, None)
    script = tmp_path / "node-bootstrap.sh"
    script.write_text(wheel.bootstrap_script())
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "CORRAL_NODE_HOME": str(tmp_path / "n")}
    argv = [str(bin_dir / "bash"), str(script), "-c", "import sys; print(sys.prefix)"]
    first = subprocess.run(argv, env={**env, **shipped}, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert "fetching" in first.stderr
    again = subprocess.run(argv, env={**env, **shipped}, capture_output=True, text=True)
    assert again.returncode == 0 and "fetching" not in again.stderr
    assert again.stdout == first.stdout
    wrong = {**shipped, "CORRAL_RUNTIME_SHA256": "0" * 64}
    bad = subprocess.run(argv, env={**env, **wrong}, capture_output=True, text=True)
    assert bad.returncode == 1 and f"not {'0' * 64}" in bad.stderr
    assert not list((tmp_path / "n" / "runtimes").glob("0000*"))


def test_no_runtime_and_no_usable_python_is_said_once_with_78(tmp_path: Path) -> None:
    bin_dir = _image(tmp_path, None)
    script = tmp_path / "node-bootstrap.sh"
    script.write_text(wheel.bootstrap_script())
    done = subprocess.run(
        [str(bin_dir / "bash"), str(script)],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path), "CORRAL_VERSION": __version__},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 78
    assert done.stderr.splitlines() == [
        "corral bootstrap: no python on this machine and no corral runtime shipped (give the "
        "run object storage, or use an image with python 3.11 or later)",
        "corral: this machine cannot boot corral (exit 78)",
    ]


def test_the_runtime_comes_over_http_with_the_images_curl(tmp_path: Path, shipped: dict) -> None:
    """A presigned URL's way (HTTP here, on loopback): fetched with curl, the URL on its
    standard input (never on a command line nor in the output)."""
    import functools
    import http.server
    import threading

    served = Path(shipped["CORRAL_RUNTIME_URL"].removeprefix("file://"))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        bin_dir = _image(tmp_path, None)
        curl = shutil.which("curl")
        if curl is None:
            pytest.skip("no curl on this machine")
        (bin_dir / "curl").symlink_to(curl)
        script = tmp_path / "node-bootstrap.sh"
        script.write_text(wheel.bootstrap_script())
        url = f"http://127.0.0.1:{server.server_address[1]}/{served.name}?X-Amz-Signature=s3cr3t"
        done = subprocess.run(
            [str(bin_dir / "bash"), str(script), "-c", "import corral; print(corral.__version__)"],
            env={
                "PATH": str(bin_dir),
                "HOME": str(tmp_path),
                "CORRAL_NODE_HOME": str(tmp_path / "n"),
                **shipped,
                "CORRAL_RUNTIME_URL": url,
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == __version__
    assert "s3cr3t" not in done.stderr + done.stdout


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or sys.base_prefix in ("/usr", "/"),
    reason="needs root, unshare and a python outside /usr (hidden by the test)",
)
def test_the_runtime_runs_where_the_controllers_python_is_not(
    tmp_path: Path, shipped: dict
) -> None:
    """Relocatable: unpacked elsewhere, with the interpreter it was packed from hidden (an
    empty tmpfs over its prefix, in a mount namespace of its own), it still runs the agent's
    imports and the standard library's compiled modules."""
    with tarfile.open(shipped["CORRAL_RUNTIME_URL"].removeprefix("file://")) as tf:
        tf.extractall(tmp_path, filter="tar")
    python = tmp_path / "corral-runtime" / "python" / "bin" / "python3"
    code = "import ssl, sqlite3, ctypes, lzma, corral.agent.main, boto3, sys; print(sys.prefix)"
    hide = f"mount -t tmpfs none {sys.base_prefix} && exec {python} -E -s -c '{code}'"
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", hide],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "corral-runtime" / "python")


def test_the_controller_ships_the_runtime_once_and_can_be_told_not_to(
    tmp_path: Path, shipped: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = tmp_path / "storage"
    env = wheel.node_install_env(str(storage), tmp_path / "wheels")
    assert env["CORRAL_RUNTIME_SHA256"] == shipped["CORRAL_RUNTIME_SHA256"]  # same content
    stored = list((storage / "_corral" / "runtimes").rglob("*.tar.gz"))
    assert [p.name for p in stored] == [
        f"corral-runtime-{__version__}-{runtime.machine_arch()}.tar.gz"
    ]
    index = json.loads((storage / "_corral" / "runtimes" / runtime.STORAGE_INDEX).read_text())
    assert index == [{"id": stored[0].parent.name, "arch": runtime.machine_arch()}]  # pruning's
    mtime = stored[0].stat().st_mtime_ns
    wheel.node_install_env(str(storage), tmp_path / "wheels")
    assert stored[0].stat().st_mtime_ns == mtime  # there already: not uploaded again
    monkeypatch.setenv("CORRAL_NODE_RUNTIME", "0")
    without = wheel.node_install_env(str(tmp_path / "s2"), tmp_path / "wheels")
    assert "CORRAL_RUNTIME_URL" not in without and "CORRAL_WHEEL_URL" in without


def _dist_archive(tmp: Path, version: str, *, with_stdlib: bool = True) -> Path:
    """A python-build-standalone ``install_only`` archive's layout: ``python/bin``,
    ``python/lib/python3.X`` (a few files of this python's standard library)."""
    tree = tmp / f"dist-{version}" / "python"
    (tree / "bin").mkdir(parents=True)
    shutil.copy(sys.executable, tree / "bin" / f"python{version}")
    (tree / "bin" / "python3").symlink_to(f"python{version}")
    lib = tree / "lib" / f"python{version}"
    lib.mkdir(parents=True)
    if with_stdlib:
        for name in ("os.py", "abc.py", "stat.py"):
            shutil.copy(Path(os.__file__).with_name(name), lib / name)
    archive = tmp / f"cpython-{version}-install_only.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(tree, "python")
    return archive


@pytest.mark.parametrize(
    ("version", "stdlib", "said"),
    [
        ("3.10", True, "python 3.10 is older than 3.11"),
        ("3.12", True, "python 3.12 is not the controller's 3.11"),
        ("3.11", False, "is not a CPython install tree"),
    ],
)
def test_a_python_dist_that_cannot_serve_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, stdlib: bool, said: str
) -> None:
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the messages name the controller's 3.11")
    built = wheel.build(tmp_path / "wheels")
    monkeypatch.setenv(runtime.ENV_DIST, str(_dist_archive(tmp_path, version, with_stdlib=stdlib)))
    with pytest.raises(BadInput) as exc:
        runtime.build(built.path, tmp_path / "cache")
    assert said in exc.value.message and "\n" not in exc.value.message
    assert exc.value.message.startswith("CORRAL_NODE_PYTHON_DIST: ")
    monkeypatch.setenv(runtime.ENV_DIST, str(tmp_path / "nowhere.tar.gz"))
    with pytest.raises(BadInput, match="no such file"):
        runtime.build(built.path, tmp_path / "cache")


def test_a_python_dist_archive_is_what_the_runtime_carries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    built = wheel.build(tmp_path / "wheels")
    monkeypatch.setenv(runtime.ENV_DIST, str(_dist_archive(tmp_path, version)))
    rt = runtime.build(built.path, tmp_path / "cache")
    with tarfile.open(rt.path) as tf:
        names = set(tf.getnames())
        link = tf.getmember("corral-runtime/python/bin/python3")
    lib = f"corral-runtime/python/lib/python{version}"
    assert {f"{lib}/os.py", f"{lib}/abc.py", f"{lib}/stat.py"} <= names
    assert link.issym() and link.linkname == f"python{version}"
    assert not [n for n in names if n.startswith(f"{lib}/") and "site-packages" not in n][3:]
    assert f"{lib}/site-packages/pydantic_core/__init__.py" not in names  # the SDK's: sdk/
    assert f"{lib}/site-packages/httpx/__init__.py" in names
    assert not [n for n in names if "sqlalchemy" in n]  # the controller's side only
    again = runtime.build(built.path, tmp_path / "cache")
    assert again.path == rt.path and again.sha256 == rt.sha256  # cached, not packed again


def test_an_image_without_curl_wget_python_or_package_manager_says_so_with_78(
    tmp_path: Path,
) -> None:
    """An nvidia/cuda base image has no curl, wget nor python: the bootstrap would install curl
    with its package manager (apt-get, dnf, microdnf, yum, apk); with none, it says what is
    missing in one line and exits 78, which the controller reads back for the attempt."""
    from corral.control.machine_log import cannot_boot

    bin_dir = _image(tmp_path, None)
    assert not [
        t for t in ("curl", "wget", "apt-get", "dnf", "yum", "apk") if (bin_dir / t).exists()
    ]
    script = tmp_path / "node-bootstrap.sh"
    script.write_text(wheel.bootstrap_script())
    done = subprocess.run(
        [str(bin_dir / "bash"), str(script)],
        env={
            "PATH": str(bin_dir),
            "HOME": str(tmp_path),
            "CORRAL_NODE_HOME": str(tmp_path / "n"),
            "CORRAL_VERSION": __version__,
            "CORRAL_RUNTIME_URL": "https://127.0.0.1:9/rt.tar.gz?X-Amz-Signature=s3cr3t",
            "CORRAL_RUNTIME_SHA256": "0" * 64,
            "CORRAL_RUNTIME_ARCH": runtime.machine_arch(),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 78, done.stderr
    why = (
        "cannot fetch corral's runtime: this machine has no curl, wget or python, and no "
        "package manager (apt-get, dnf, microdnf, yum, apk) to install curl with"
    )
    assert done.stderr.splitlines()[-2:] == [
        f"corral bootstrap: {why}",
        "corral: this machine cannot boot corral (exit 78)",
    ]
    assert cannot_boot(done.stderr) == why
    assert "s3cr3t" not in done.stderr
    assert not list((tmp_path / "n" / "runtimes").iterdir())  # nothing half-fetched left
