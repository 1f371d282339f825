"""A sweep through the API and on the dashboard: the leaderboard with the best trial marked,
and a chart of the metric against each numeric parameter."""

from __future__ import annotations

import httpx

from corral.spec.sweep import SweepSpec
from corral.store import Store
from server.conftest import Api

SWEEP = {
    "parameters": {"env.LR": {"values": [0.1, 0.3, 0.9]}, "env.OPT": {"values": ["adam", "sgd"]}},
    "metric": {"name": "loss"},
    "search": "grid",
}
JOB = {"name": "lr", "run": "true", "workdir": "/tmp"}


def test_the_leaderboard_and_its_chart(api: Api) -> None:
    store = Store.open()
    sweep = SweepSpec.model_validate(SWEEP).shown()
    store.add_sweep(name="lr", sweep=sweep, job=JOB, spec_path="/tmp/s.yaml", owner="alice")
    for n, (lr, loss) in enumerate([(0.1, 0.5), (0.3, 0.01), (0.9, 3.0)]):
        store.start_trial(
            "lr", n, params={"env.LR": lr, "env.OPT": "adam"}, spec=JOB, spec_hash="h",
            spec_path="/tmp/s.yaml", workdir="/tmp", owner="alice", project=None,
        )  # fmt: skip
        state = "pruned" if loss > 1 else "complete"
        store.update_trial("lr", n, state=state, value=loss, step=10, intermediate={"10": loss})
    with api.client(api.read_only_token) as c:
        got = c.get("/api/v1/sweeps/lr")
        assert got.status_code == 200, got.text
        body = got.json()
        assert body["best_trial"] == 1 and body["best_params"] == {"env.LR": 0.3, "env.OPT": "adam"}
        assert [t["best"] for t in body["trials"]] == [False, True, False]
        assert c.get("/api/v1/sweeps").json()["sweeps"][0]["name"] == "lr"
        assert c.get("/api/v1/sweeps/nope").status_code == 404
    with httpx.Client(base_url=api.url, cookies={"corral_token": api.read_only_token}) as page:
        html = page.get("/sweeps/lr").text
        assert 'data-sweep="lr"' in html and '<tr class="best">' in html
        assert 'data-param="env.LR"' in html and 'data-param="env.OPT"' not in html  # numeric only
        assert "pruned" in html
        assert '<a href="/sweeps/lr">lr</a>' in page.get("/sweeps").text
