"""A run's results over the API (real uvicorn, a real run on the local provider uploading to
a local artifact storage): the manifest, one file with its sha256, the whole archive built
from storage; paths the manifest does not list, runs without storage and a storage changed
behind the manifest's back are refused with a clear error."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from server.conftest import Api
from server.test_api import follow, submit

JOB = """
name: results
artifacts: {{paths: ["out/**"], storage: {storage}}}
run: mkdir -p out/sub && head -c 300000 /dev/urandom > out/model.bin && echo hello > out/sub/notes.txt
"""


def test_the_manifest_a_file_and_the_archive_come_from_storage(api: Api, tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    with api.client(api.read_only_token) as reader, api.client(api.token) as c:
        run = submit(c, JOB.format(storage=storage), tmp_path)
        assert follow(c, run["id"])[-1][1]["state"] == "SUCCEEDED"

        listed = reader.get(f"/api/v1/runs/{run['id']}/artifacts")
        assert listed.status_code == 200, listed.text
        body = listed.json()
        assert [f["path"] for f in body["files"]] == ["out/model.bin", "out/sub/notes.txt"]
        assert body["manifest_uri"] == f"{storage}/{run['id']}/manifest.json"
        assert body["manifest"]["run_id"] == run["id"] and body["total_bytes"] == 300006
        model = storage / run["id"] / "artifacts" / "out" / "model.bin"
        sha = hashlib.sha256(model.read_bytes()).hexdigest()
        assert body["files"][0] == {"path": "out/model.bin", "size": 300000, "sha256": sha}

        one = reader.get(f"/api/v1/runs/{run['id']}/artifacts/out/model.bin")
        assert one.status_code == 200 and one.content == model.read_bytes()
        assert one.headers["x-corral-sha256"] == sha
        assert 'filename="model.bin"' in one.headers["content-disposition"]

        archive = reader.get(f"/api/v1/runs/{run['id']}/results.tar.gz")
        assert archive.status_code == 200 and archive.headers["content-type"] == "application/gzip"
        with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as tar:
            names = tar.getnames()
            manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
            model_bytes = tar.extractfile("artifacts/out/model.bin").read()  # type: ignore[union-attr]
        assert names == ["manifest.json", "artifacts/out/model.bin", "artifacts/out/sub/notes.txt"]
        assert manifest == body["manifest"] and model_bytes == model.read_bytes()

        for bad in ("out/missing.bin", "../../etc/passwd", "out/%2e%2e/x"):
            res = reader.get(f"/api/v1/runs/{run['id']}/artifacts/{bad}")
            assert res.status_code == 404 and res.json()["code"] == "not_found", bad

        model.write_bytes(b"short")  # storage changed after the run wrote its manifest
        for path in ("/artifacts/out/model.bin", "/results.tar.gz"):
            res = reader.get(f"/api/v1/runs/{run['id']}{path}")
            assert res.status_code == 409 and "the manifest says 300000" in res.json()["message"]


def test_a_run_without_artifact_storage_says_so(api: Api, tmp_path: Path) -> None:
    with api.client(api.token) as c:
        run = submit(c, 'name: plain\nrun: "true"\n', tmp_path)
        follow(c, run["id"])
        for path in ("/artifacts", "/results.tar.gz", "/artifacts/x"):
            res = c.get(f"/api/v1/runs/{run['id']}{path}")
            assert res.status_code == 404
            assert "has no artifact storage (artifacts.storage)" in res.json()["message"]
        assert c.get("/api/v1/runs/nosuchrun/artifacts").status_code == 404
