"""An IO.net container that cannot boot corral (the real node bootstrap on an image without
python, no runtime shipped) says why and exits 78, and IO.net replaces it:
the run fails with that reason as soon as the container's log says it, not at the provision
timeout (600 s here), and no other deployment is created for it."""

from __future__ import annotations

from control.helpers import submit, write_spec
from corral.store import Store
from support.cannot_boot import NO_PYTHON, bootstrap_argv, run_until_it_ends

from .fake_server import API_KEY


def test_a_container_that_cannot_boot_fails_its_run_within_the_boot(
    make_provider, fake, tmp_path, monkeypatch
):
    for name, value in {
        **fake.env(),
        "IONET_API_KEY": API_KEY,
        "CORRAL_PROVIDERS": "ionet",
    }.items():
        monkeypatch.setenv(name, value)
    fake.command_override = bootstrap_argv(tmp_path / "image")
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('never runs')\n")
    spec = write_spec(
        work,
        """
        name: no-python
        run: python train.py
        resources: {gpus: "H100:1", providers: [ionet]}
        recovery: {max_error_restarts: 3}
        """,
    )
    run_id = submit(spec)
    run, took = run_until_it_ends(run_id, "ionet", make_provider())
    assert run.state == "FAILED" and took < 60, run.reason
    assert run.reason == f"the machine cannot boot corral: {NO_PYTHON}"
    assert len(fake.deploys) == 1
    assert [a.number for a in Store.open().attempts(run_id)] == [1]
