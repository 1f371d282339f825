"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright):
a run submitted through the API appears in the live table, its page draws the loss chart
from the run's progress events, Stop ends it STOPPED. A live run's page tells the truth: its
accrued cost, every validation point, the log box on its newest line; once stopped, its
stage is drawn as stopped and the runs table says why it ended. Screenshots of the run page
are saved under the test's tmp dir (their paths are printed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from server.conftest import Api
from server.test_api import submit

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

TRAIN = """\
import math, time
from corral.sdk import report

for step in range(1, 100000):
    loss = 2.5 * math.exp(-step / 40) + 0.3
    report(step, total=400, loss=loss, val_loss=loss * 1.08, val_accuracy=min(0.97, step / 60))
    if step % 10 == 0:
        print(f"step {step}: loss {loss:.4f}", flush=True)
    time.sleep(0.2)
"""


@pytest.fixture
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not shutil.which(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (scripts/test.sh installs it)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def test_submit_see_open_chart_stop_in_a_real_browser(api: Api, tmp_path: Path, browser) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    page = browser.new_page(viewport={"width": 1360, "height": 900})
    blocked: list[str] = []  # nothing may leave for another origin
    page.on("request", lambda r: None if r.url.startswith(api.url) else blocked.append(r.url))

    page.goto(f"{api.url}/")
    page.fill("#token", api.token)
    page.click("button[type=submit]")
    page.wait_for_selector("#runs")

    with api.client(api.token) as c:
        run = submit(c, "name: browser-run\nrun: python train.py\n", tmp_path)
    row = page.locator(f"tr[data-run-id='{run['id']}']")
    row.wait_for(timeout=20_000)  # the live table picked it up
    page.screenshot(path=str(tmp_path / "dashboard-runs.png"), full_page=True)
    row.locator("a").click()
    page.wait_for_url(f"**/runs/{run['id']}")

    # two progress events (they are 10 s apart per stage) make a line with points
    loss_points = "#chart-loss g.series[data-name='loss'] circle.pt"
    page.wait_for_function(
        f"() => document.querySelectorAll({loss_points!r}).length >= 2", timeout=45_000
    )
    assert page.locator("#chart-loss g.series[data-name='val_loss'] circle.pt").count() >= 2
    assert (
        page.locator("#chart-validation g.series[data-name='val_accuracy'] circle.pt").count() >= 2
    )
    assert page.locator("#chart-cost svg").count() == 1
    assert "RUNNING" in page.inner_text("#run-state")
    page.wait_for_selector("#part-logs .logs")

    page.click("button[data-action=stop]")
    page.wait_for_function(
        "() => document.querySelector('#run-state').textContent.trim() === 'STOPPED'",
        timeout=60_000,
    )
    assert page.locator("button[data-action=stop]").is_disabled()
    page.wait_for_timeout(300)
    shot = tmp_path / "dashboard-run-page.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"\nscreenshot of the run page: {shot}")
    assert shot.stat().st_size > 10_000
    assert blocked == []


LIVE = """\
import time
from corral.sdk import report

for i in range(300):  # more lines than the log box shows
    print(f"warming up {i}", flush=True)
for step in range(1, 100000):
    extra = {"val_acc": step / 1000} if step % 10 == 0 else {}  # between progress events
    report(step, total=100000, loss=1.0 / step, **extra)
    if step % 20 == 0:
        print(f"newest line at step {step}", flush=True)
    time.sleep(0.05)
"""


def _login(page, api: Api) -> None:
    page.goto(f"{api.url}/")
    page.fill("#token", api.token)
    page.click("button[type=submit]")
    page.wait_for_selector("#runs")


def test_a_live_run_page_shows_its_cost_validation_log_end_and_why_it_ended(
    api: Api, tmp_path: Path, browser
) -> None:
    from corral.store import Store
    from support.waiting import wait_until

    (tmp_path / "train.py").write_text(LIVE)
    page = browser.new_page(viewport={"width": 1360, "height": 900})
    _login(page, api)
    with api.client(api.token) as c:
        run = submit(c, "name: live-run\nrun: python train.py\n", tmp_path)
        wait_until(lambda: c.get(f"/api/v1/runs/{run['id']}").json()["state"] == "RUNNING", 60)
    store = Store.open()
    try:  # a machine at $3600/h: a cent a second
        store.update_attempt(run["id"], 1, price_per_hour=3600.0)
    finally:
        store.close()
    page.goto(f"{api.url}/runs/{run['id']}")

    # the validation chart draws the points reported between two progress events
    val_points = "#chart-validation g.series[data-name='val_acc'] circle.pt"
    page.wait_for_function(
        f"() => document.querySelectorAll({val_points!r}).length >= 5", timeout=45_000
    )
    # the cost so far, on the chart and on the attempt's row: not $0.00 while it runs
    cost_tip = page.locator("#chart-cost circle.pt title").last.text_content() or ""
    assert cost_tip.startswith("cost (USD): $") and "$0.00" not in cost_tip, cost_tip
    row = page.inner_text("#part-timeline .row[data-attempt='1'] .sub")
    assert "running" in row and "$0.00" not in row, row
    # the log box shows its newest line, after the page's refreshes too
    page.wait_for_timeout(2500)
    at_end = page.evaluate(
        "() => { const b = document.querySelector('#part-logs .logs');"
        " return b.scrollHeight > b.clientHeight && b.scrollTop + b.clientHeight >= b.scrollHeight - 8; }"
    )
    assert at_end
    last = page.inner_text("#part-logs .logs").rstrip().splitlines()[-1]
    assert "newest line at step" in last
    shot = tmp_path / "dashboard-live-run.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"\nscreenshot of the live run page: {shot}")

    page.click("button[data-action=stop]")
    page.wait_for_function(
        "() => document.querySelector('#run-state').textContent.trim() === 'STOPPED'",
        timeout=60_000,
    )
    violet = "rgba(109, 40, 217, 0.8)"  # a stop, not the preempted orange
    stage = page.locator("#part-timeline .stage").first
    assert "stopped" in (stage.get_attribute("class") or "")
    assert stage.evaluate("e => getComputedStyle(e).backgroundColor") == violet
    page.goto(f"{api.url}/")
    why = page.inner_text(f"tr[data-run-id='{run['id']}'] .why")
    assert why.strip() and why.strip() != "-", why


def test_the_gpu_page_charts_each_gpu_over_time(api: Api, tmp_path: Path, browser) -> None:
    from server.test_gpu_history import seed

    seed(2.0)  # two GPUs of this machine for two hours, a run's node for the last half hour
    page = browser.new_page(viewport={"width": 1360, "height": 1000})
    blocked: list[str] = []  # nothing may leave for another origin
    page.on("request", lambda r: None if r.url.startswith(api.url) else blocked.append(r.url))
    _login(page, api)
    page.goto(f"{api.url}/gpus")

    series = "#chart-gpu-util g.series"
    page.wait_for_function(
        f"() => document.querySelectorAll({series!r}).length === 3", timeout=20_000
    )
    names = page.eval_on_selector_all(series, "els => els.map(e => e.getAttribute('data-name'))")
    assert names == ["box-1 · GPU 0 H100", "box-1 · GPU 1 H100", "train (attempt 1) · GPU 0 L40S"]
    legend = page.inner_text("#chart-gpu-util .chart-legend")
    assert "train (attempt 1) · GPU 0 L40S" in legend
    # the 6 h window: two hours of readings, a point per 73 s span (300 at most in 6 h)
    host0 = "#chart-gpu-util g.series[data-name='box-1 · GPU 0 H100'] circle.pt"
    assert 95 <= page.locator(host0).count() <= 100
    node = "#chart-gpu-util g.series[data-name='train (attempt 1) · GPU 0 L40S'] circle.pt"
    assert 24 <= page.locator(node).count() <= 26
    tip = page.locator(node + " title").last.text_content() or ""
    assert tip.startswith("train (attempt 1) · GPU 0 L40S: 97 % at "), tip
    mem = page.locator("#chart-gpu-mem g.series[data-name='box-1 · GPU 1 H100'] circle.pt title")
    assert (mem.last.text_content() or "").startswith("box-1 · GPU 1 H100: 2 GB at ")

    # the last hour: every reading, one a minute
    page.click("#gpu-history button[data-window='1h']")
    page.wait_for_function(
        f"() => document.querySelectorAll({host0!r}).length >= 60"
        f" && document.querySelectorAll({host0!r}).length <= 61",
        timeout=20_000,
    )
    assert page.get_attribute("button[data-window='1h']", "aria-pressed") == "true"
    assert page.get_attribute("button[data-window='6h']", "aria-pressed") == "false"
    shot = tmp_path / "dashboard-gpus.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"\nscreenshot of the GPU page: {shot}")
    assert shot.stat().st_size > 10_000
    assert blocked == []
