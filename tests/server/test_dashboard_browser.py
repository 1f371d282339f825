"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright):
a run submitted through the API appears in the live table, its page draws the loss chart
from the run's progress events, Stop ends it STOPPED. A screenshot of the run page is saved
under the test's tmp dir (its path is printed)."""

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
