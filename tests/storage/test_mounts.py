"""``mounts:`` on a node: an S3 prefix (moto) copied into the workdir before the stages, kept
in the node's cache so the next attempt there downloads only what changed; the directory
uploaded back while the stages run and at the end; the bundle from S3 too."""

from __future__ import annotations

from pathlib import Path

from agent.helpers import make_plan
from corral.agent.main import NodeLaunch
from corral.bundle import pack as packing
from corral.wire.code import BundleRef, CodePlan, MountPlan

from .conftest import Bucket, assert_no_secret


def _plan(tmp_path: Path, bucket: Bucket, attempt: int, bundle, run: str, **mount):
    return make_plan(
        tmp_path,
        [{"name": "main", "run": run}],
        attempt=attempt,
        workdir="/work",
        state_dir=f"/state/a{attempt}",
        code=CodePlan(
            bundle=BundleRef(
                sha256=bundle.sha256, size=bundle.size, storage=bucket.uri(f"code/{bundle.sha256}")
            ),
            mounts=[
                MountPlan(source=bucket.uri("data"), path="data"),
                MountPlan(source=bucket.uri("outputs"), path="/outputs", cache=False, **mount),
            ],
        ),
    )


def test_mounts_are_copied_in_cached_and_uploaded_back(
    start_agent, bucket: Bucket, tmp_path: Path
) -> None:
    work = tmp_path / "controller-work"
    work.mkdir()
    (work / "job.sh").write_text(
        "cat data/a.txt data/sub/b.txt > /dev/null\n"
        'echo "from attempt $CORRAL_ATTEMPT" > "$OUT/result.txt"\n'
        "sleep 1.5\n"
    )
    bundle = packing.pack(tmp_path / "cache", packing.collect(str(work)))
    bucket.put(f"code/{bundle.sha256}", bundle.path.read_bytes())
    bucket.put("data/a.txt", b"a" * 1000)
    bucket.put("data/sub/b.txt", b"b" * 2000)
    root = tmp_path / "node"
    run = 'OUT="$CORRAL_NODE_OUT" bash job.sh'
    plan = _plan(tmp_path, bucket, 1, bundle, run, upload_every_s=0.5, upload_at_end=True)
    plan = plan.model_copy(update={"env": {"CORRAL_NODE_OUT": str(root / "outputs")}})
    client = start_agent(plan, launch=NodeLaunch(root=str(root)))
    done = client.wait_finished(30)
    assert done["phase"] == "succeeded", done["reason"]
    assert (root / "work" / "data" / "sub" / "b.txt").read_bytes() == b"b" * 2000
    assert bucket.get("outputs/result.txt") == b"from attempt 1\n"
    events = client.get("/events")["events"]
    [down_data, down_out] = [e["data"] for e in events if e["type"] == "mount.downloaded"]
    assert (down_data["files"], down_data["bytes"], down_data["cached_files"]) == (2, 3000, 0)
    assert down_out["files"] == 0
    uploaded = [e["data"] for e in events if e["type"] == "mount.uploaded"]
    assert uploaded and uploaded[0]["files"] == 1  # no change afterwards: nothing more sent
    assert sum(u["files"] for u in uploaded) == 1
    ready = next(e["data"] for e in events if e["type"] == "code.ready")
    assert ready["source"] == "storage"
    for event in events:
        assert_no_secret(str(event))

    # a second attempt on the same machine: the cache has a.txt; b.txt changed in S3
    bucket.put("data/sub/b.txt", b"B" * 500)
    plan2 = _plan(tmp_path, bucket, 2, bundle, "cat data/sub/b.txt", upload_at_end=True)
    client = start_agent(plan2, launch=NodeLaunch(root=str(root)))
    done = client.wait_finished(30)
    assert done["phase"] == "succeeded", done["reason"]
    events = client.get("/events")["events"]
    down = next(e["data"] for e in events if e["type"] == "mount.downloaded")
    assert (down["files"], down["bytes"], down["cached_files"]) == (2, 500, 1)
    assert (root / "work" / "data" / "sub" / "b.txt").read_bytes() == b"B" * 500


def test_a_mount_that_cannot_be_read_fails_the_attempt_before_the_setup(
    start_agent, bucket: Bucket, tmp_path: Path
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "x").write_text("x")
    bundle = packing.pack(tmp_path / "cache", packing.collect(str(work)))
    bucket.put(f"code/{bundle.sha256}", bundle.path.read_bytes())
    plan = _plan(tmp_path, bucket, 1, bundle, "true").model_copy(update={"setup": ["touch /never"]})
    plan.code.mounts[0] = MountPlan(source="s3://no-such-bucket-zz9/data", path="data")
    client = start_agent(plan, launch=NodeLaunch(root=str(tmp_path / "node")))
    done = client.wait_finished(30)
    assert done["phase"] == "failed"
    assert "mount s3://no-such-bucket-zz9/data" in done["reason"]
    assert_no_secret(done["reason"])
