"""Re-saving a step on a storage without atomic rename (object stores) never loses the step: the
new copy goes to ``ckpt-<step>.v<k>/`` beside the old one, which is deleted only once the new
manifest is written. Failures and crashes are injected at every storage write of a re-save, on
a local directory without atomic rename and on S3 (a moto server on loopback)."""

from __future__ import annotations

import json
import logging
import re
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from corral.sdk import Checkpointer, CheckpointError, CheckpointWarning, LocalStorage, Storage

MUTATING = ("makedirs", "open_write", "write_bytes", "remove", "rmtree", "rename")


class Crash(BaseException):
    """The writer process died here: nothing after it reaches the storage."""


class Injected(OSError):
    pass


class Injector:
    """A storage that logs its mutating calls and makes one of them fail: the ``fail_at``-th
    (1-based), or the first for which ``fail_when(op, path)`` is true. ``crash=False``: that
    call raises an OSError and the storage works again (an error the writer handles);
    ``crash=True``: it raises :class:`Crash` and so does every later call (a kill -9)."""

    def __init__(
        self,
        inner: Any,
        *,
        fail_at: int | None = None,
        fail_when: Callable[[str, str], bool] | None = None,
        crash: bool = False,
    ):
        self.inner, self.fail_at, self.fail_when, self.crash = inner, fail_at, fail_when, crash
        self.atomic_rename = inner.atomic_rename
        self.calls: list[tuple[str, str]] = []
        self.dead = False
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.dead:
                raise Crash(f"{name} after the crash")
            if name in MUTATING:
                self.calls.append((name, args[0]))
                due = (self.fail_at is not None and len(self.calls) == self.fail_at) or (
                    self.fail_when is not None and self.fail_when(name, args[0])
                )
                if due and not self.fired:
                    self.fired = True
                    if self.crash:
                        self.dead = True
                        raise Crash(f"killed at {name} {args[0]}")
                    raise Injected(f"injected failure at {name} {args[0]}")
            return attr(*args, **kwargs)

        return call


class NonAtomicLocal(LocalStorage):
    """A local directory used the way an object store is (no renames)."""

    atomic_rename = False


# --- storages: a local directory without atomic rename, and S3 on a moto server --------------


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def s3_storage(endpoint: str) -> Storage:
    from corral.storage.s3 import S3Storage

    env = {
        "AWS_ACCESS_KEY_ID": "AKIACORRALTEST7Q3Z",
        "AWS_SECRET_ACCESS_KEY": "corral-secret-resave",
        "AWS_REGION": "us-east-1",
        "CORRAL_S3_ENDPOINT_URL": endpoint,
    }
    return S3Storage(environ=env, max_attempts=1)


@pytest.fixture(params=["local", "s3"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], tuple[Storage, str]]:
    """``place()`` -> a storage without atomic rename and a fresh, empty root in it."""
    if request.param == "local":
        roots = iter(range(1000))
        return lambda: (NonAtomicLocal(), str(tmp_path / f"ck{next(roots)}"))
    endpoint = request.getfixturevalue("moto_endpoint")
    storage = s3_storage(endpoint)
    bucket = f"corral-{uuid.uuid4().hex[:12]}"
    storage.client.create_bucket(Bucket=bucket)
    roots = iter(range(1000))
    return lambda: (storage, f"s3://{bucket}/run{next(roots)}")


# --- helpers ---------------------------------------------------------------------------------


def state(version: str, step: int = 5) -> dict:
    return {"w": np.full(500, ord(version), dtype=np.float32), "step": step, "version": version}


def put(cp: Checkpointer, version: str, step: int = 5) -> None:
    cp.save(state(version, step), step, metrics={"version": version})


def copies_of(storage: Storage, root: str, step: int) -> list[str]:
    return [e for e in storage.listdir(root) if re.fullmatch(rf"ckpt-{step}(\..+)?", e)]


def seeded(storage: Storage, root: str) -> None:
    """Steps 4 and 5 (version A), as a previous writer process left them."""
    cp = Checkpointer(root, storage=storage, keep_last=10, async_save=False)
    put(cp, "A", 4)
    put(cp, "A", 5)


def check_readers(storage: Storage, root: str, version: str) -> None:
    """What any reader sees: step 5 exactly once, as a whole copy of ``version``; and as the
    newest checkpoint while it is the highest step."""
    reader = Checkpointer(root, storage=storage, keep_last=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even a skipped copy along the way
        infos = reader.checkpoints()
        assert [c.step for c in infos][:2] == [4, 5] and len({c.step for c in infos}) == len(infos)
        five = infos[1]
        assert five.name == "ckpt-5" and five.metrics == {"version": version}
        assert reader.restore("ckpt-5")["version"] == version
        assert reader.restore(five)["version"] == version
        if len(infos) == 2:
            latest = reader.latest()
            assert latest is not None and latest.step == 5
            restored = reader.restore()
            assert restored["version"] == version and restored["step"] == 5
            assert np.all(restored["w"] == ord(version))


def resave_log(place: Callable[[], tuple[Storage, str]]) -> list[tuple[str, str]]:
    """The mutating storage calls of a re-save of step 5 by a new writer process."""
    storage, root = place()
    seeded(storage, root)
    spy = Injector(storage)
    put(Checkpointer(root, storage=spy, keep_last=10, async_save=False), "B", 5)
    return spy.calls


def manifest_index(calls: list[tuple[str, str]]) -> int:
    """1-based index of the new copy's manifest write."""
    return next(
        i
        for i, (op, path) in enumerate(calls, start=1)
        if op == "write_bytes" and re.search(r"ckpt-5\.v1/COMPLETE$", path)
    )


# --- tests -----------------------------------------------------------------------------------


def test_a_resave_writes_a_new_version_then_deletes_the_old_copy(place):
    calls = resave_log(place)
    m = manifest_index(calls)
    after = calls[m:]  # the old copy is touched only after the new manifest, manifest first
    assert [op for op, _ in after] == ["remove", "rmtree"]
    assert re.search(r"ckpt-5/COMPLETE$", after[0][1]) and re.search(r"ckpt-5$", after[1][1])
    before = [path for _, path in calls[: m - 1]]
    assert not any(re.search(r"ckpt-5(/|$)", p) for p in before), before


@pytest.mark.parametrize("crash", [False, True], ids=["error", "crash"])
def test_a_failure_at_any_write_of_a_resave_keeps_the_old_or_the_new_copy(place, crash):
    calls = resave_log(place)
    n_calls, m = len(calls), manifest_index(calls)
    assert n_calls >= 6
    for k in range(1, n_calls + 1):
        storage, root = place()
        seeded(storage, root)
        injector = Injector(storage, fail_at=k, crash=crash)
        writer = Checkpointer(root, storage=injector, keep_last=10, async_save=False)
        expected = "B" if k > m else "A"  # the k-th call never happened
        saved_anyway = False
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if crash:
                with pytest.raises(Crash):
                    put(writer, "B", 5)
            elif k <= m:
                try:
                    put(writer, "B", 5)
                except CheckpointError as exc:
                    assert "injected failure" in str(exc)
                else:  # it hit the cleanup of an earlier writer's leftovers: warned, saved
                    saved_anyway, expected = True, "B"
            else:  # the new copy is complete: the save stands, the old copy is left for later
                put(writer, "B", 5)
        if saved_anyway:
            assert any("saving anyway" in str(w.message) for w in caught), k
        if not crash and k > m:
            assert any(
                issubclass(w.category, CheckpointWarning)
                and "could not be deleted yet" in str(w.message)
                for w in caught
            ), k
        check_readers(storage, root, expected)
        if not crash:  # the same writer goes on: a later save, and reading in the process
            put(writer, "C", 6)
            assert writer.restore("ckpt-5")["version"] == expected
            assert [c.step for c in writer.checkpoints()] == [4, 5, 6]
        # The next writer process cleans up: one copy of step 5 left, the one readers used.
        put(Checkpointer(root, storage=storage, keep_last=10, async_save=False), "D", 7)
        assert len(copies_of(storage, root, 5)) == 1, (k, storage.listdir(root))
        check_readers(storage, root, expected)


def crash_when(op: str, pattern: str) -> Callable[[str, str], bool]:
    return lambda o, path: o == op and re.search(pattern, path) is not None


@pytest.mark.parametrize(
    ("where", "left", "version", "kept"),
    [
        # old complete + new incomplete (killed before the new manifest): the old copy is it
        (
            crash_when("write_bytes", r"ckpt-5\.v1/COMPLETE$"),
            ["ckpt-5", "ckpt-5.v1"],
            "A",
            "ckpt-5",
        ),
        # both complete (killed before deleting the old one): the newer version is it
        (crash_when("remove", r"ckpt-5/COMPLETE$"), ["ckpt-5", "ckpt-5.v1"], "B", "ckpt-5.v1"),
        # old copy without its manifest (killed while deleting it) + new complete
        (crash_when("rmtree", r"ckpt-5$"), ["ckpt-5", "ckpt-5.v1"], "B", "ckpt-5.v1"),
        # only the new version
        (None, ["ckpt-5.v1"], "B", "ckpt-5.v1"),
    ],
    ids=["old+new-incomplete", "both-complete", "old-without-manifest+new", "only-new"],
)
def test_cleanup_resolves_every_leftover_of_a_resave(place, where, left, version, kept):
    storage, root = place()
    seeded(storage, root)
    writer = Checkpointer(
        root, storage=Injector(storage, fail_when=where, crash=True), async_save=False
    )
    if where is None:
        put(writer, "B", 5)
    else:
        with pytest.raises(Crash):
            put(writer, "B", 5)
    assert copies_of(storage, root, 5) == left
    check_readers(storage, root, version)
    put(Checkpointer(root, storage=storage, keep_last=10, async_save=False), "C", 6)
    assert copies_of(storage, root, 5) == [kept]
    check_readers(storage, root, version)


def test_cleanup_keeps_the_newest_complete_of_several_versions_and_resaves_above_them(place):
    storage, root = place()
    seeded(storage, root)
    put(Checkpointer(root, storage=storage, async_save=False), "B", 5)  # -> ckpt-5.v1
    killed = Injector(
        storage, fail_when=crash_when("write_bytes", r"ckpt-5\.v2/COMPLETE$"), crash=True
    )
    with pytest.raises(Crash):
        put(Checkpointer(root, storage=killed, async_save=False), "C", 5)
    assert copies_of(storage, root, 5) == ["ckpt-5.v1", "ckpt-5.v2"]
    check_readers(storage, root, "B")
    writer = Checkpointer(root, storage=storage, keep_last=10, async_save=False)
    put(writer, "D", 6)  # cleanup: the incomplete v2 goes
    assert copies_of(storage, root, 5) == ["ckpt-5.v1"]
    put(writer, "E", 5)
    assert copies_of(storage, root, 5) == ["ckpt-5.v2"]
    assert Checkpointer(root, storage=storage).restore("ckpt-5")["version"] == "E"


def test_retention_deletes_every_copy_of_a_step_and_the_older_one_never_shows(place):
    """Both copies complete (a writer killed before deleting the old one); retention in a
    writer that has already done its cleanup then deletes step 5: the older copy goes first,
    so no reader ever sees version A again."""
    storage, root = place()
    seeded(storage, root)
    seen: list[str | None] = []

    class Watching(Injector):
        """After each deletion, what a reader restores as step 5 (None: no step 5)."""

        def __getattr__(self, name: str) -> Any:
            attr = super().__getattr__(name)
            if name not in ("remove", "rmtree"):
                return attr

            def watched(*args: Any) -> Any:
                out = attr(*args)
                reader = Checkpointer(root, storage=storage)
                five = [c for c in reader.checkpoints() if c.step == 5]
                seen.append(reader.restore(five[0])["version"] if five else None)
                return out

            return watched

    writer = Checkpointer(root, storage=Watching(storage), keep_last=1, async_save=False)
    put(writer, "A", 3)  # its cleanup is done; retention deletes step 4
    killed = Injector(storage, fail_when=crash_when("remove", r"ckpt-5/COMPLETE$"), crash=True)
    with pytest.raises(Crash):  # another writer, killed: ckpt-5 (A) and ckpt-5.v1 (B)
        put(Checkpointer(root, storage=killed, async_save=False), "B", 5)
    assert copies_of(storage, root, 5) == ["ckpt-5", "ckpt-5.v1"]
    seen.clear()
    put(writer, "C", 6)  # retention (keep_last=1) deletes steps 3 and 5
    assert copies_of(storage, root, 5) == []
    assert seen and "A" not in seen and seen[-1] is None, seen
    assert [c.step for c in Checkpointer(root, storage=storage).checkpoints()] == [6]


def test_s3_round_trip_resaving_a_step_twice(moto_endpoint, tmp_path, monkeypatch):
    progress = tmp_path / "progress.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(progress))
    storage = s3_storage(moto_endpoint)
    bucket = f"corral-{uuid.uuid4().hex[:12]}"
    storage.client.create_bucket(Bucket=bucket)
    root = f"s3://{bucket}/run"
    cp = Checkpointer(root, storage=storage, keep_last=2)
    cp.save(state("A"), 5, metrics={"loss": 3.0})
    cp.save(state("B"), 5, metrics={"loss": 2.0})
    cp.save(state("C"), 5, metrics={"loss": 1.0})
    cp.wait()
    keys = sorted(o["Key"] for o in storage.client.list_objects_v2(Bucket=bucket)["Contents"])
    assert keys == [
        "run/ckpt-5.v2/COMPLETE",
        "run/ckpt-5.v2/state.pkl",
        "run/ckpt-5.v2/tensors-00000.safetensors",
    ]
    paths = [json.loads(line)["path"] for line in progress.read_text().splitlines()]
    assert paths == [f"{root}/ckpt-5", f"{root}/ckpt-5.v1", f"{root}/ckpt-5.v2"]
    for reader in (cp, Checkpointer(root, storage=storage)):
        [info] = reader.checkpoints()
        assert (info.step, info.name, info.path) == (5, "ckpt-5", f"{root}/ckpt-5.v2")
        assert info.metrics == {"loss": 1.0}
        assert reader.latest().step == 5
        assert reader.restore()["version"] == "C"
        assert reader.restore("ckpt-5")["version"] == "C"
        assert reader.restore(f"{root}/ckpt-5")["version"] == "C"  # a path from before
    put(cp, "D", 6)
    put(cp, "E", 7)  # keep_last=2: step 5 goes, every copy of it
    cp.wait()
    names = {
        k["Key"].split("/")[1] for k in storage.client.list_objects_v2(Bucket=bucket)["Contents"]
    }
    assert names == {"ckpt-6", "ckpt-7"}


def test_a_local_disk_keeps_replacing_in_place(tmp_path: Path):
    """The atomic-rename path is unchanged: no versions, ``ckpt-<step>.v1`` is no checkpoint."""
    ck = tmp_path / "ck"
    cp = Checkpointer(ck, async_save=False)
    put(cp, "A", 5)
    put(cp, "B", 5)
    assert sorted(p.name for p in ck.iterdir()) == ["ckpt-5"]
    (ck / "ckpt-5.v1").mkdir()  # a stray directory of that shape is left alone and unread
    (ck / "ckpt-5.v1" / "COMPLETE").write_text("not a manifest")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Checkpointer(ck).restore()["version"] == "B"
    put(cp, "C", 6)
    assert sorted(p.name for p in ck.iterdir()) == ["ckpt-5", "ckpt-5.v1", "ckpt-6"]
