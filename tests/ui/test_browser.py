"""Headless Chromium loads the Prefect UI and the MLflow UI and finds the deployment and the run in them."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from flows.serve import DEPLOYMENT_NAME, sgt_run
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.ui

CHROMIUM = "/usr/bin/chromium"  # Debian's package; `playwright install` would download a browser instead
if not Path(CHROMIUM).is_file():
    pytest.skip(f"{CHROMIUM} not found: apt-get install chromium chromium-driver", allow_module_level=True)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed: pip install -e '.[ui]' (make test-ui does)"
)

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = REPO_ROOT / "artifacts" / "ui"
PAGE_TIMEOUT_MS = 60_000  # the first load of each single-page app compiles a lot of JavaScript on 2 cores


@pytest.fixture(scope="module")
def page():
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(PAGE_TIMEOUT_MS)
        yield page
        browser.close()


def test_prefect_ui_shows_the_deployment_and_the_run(page, ui_stack, served_run):
    page.goto(f"{ui_stack.prefect_url}/deployments", wait_until="load")
    sync_api.expect(page.get_by_text(sgt_run.name, exact=True).first).to_be_visible()
    sync_api.expect(page.get_by_text(DEPLOYMENT_NAME, exact=True).first).to_be_visible()
    # the UI reaches its API on the port it was started on, not Prefect's default 4200
    sync_api.expect(page.get_by_text("Can't connect to Server API")).to_have_count(0)
    page.screenshot(path=SCREENSHOTS / "prefect.png")

    page.goto(f"{ui_stack.prefect_url}/runs/flow-run/{served_run.id}", wait_until="load")
    sync_api.expect(page.get_by_text(served_run.name).first).to_be_visible()
    sync_api.expect(page.get_by_text("Completed").first).to_be_visible()
    page.screenshot(path=SCREENSHOTS / "prefect_run.png")


def test_mlflow_ui_shows_the_run_and_its_metrics(page, ui_stack, served_run):
    client = MlflowClient(ui_stack.tracking_uri)
    experiment = client.get_experiment_by_name("sgt-minesweeper")
    (run,) = client.search_runs([experiment.experiment_id], "tags.`sgt.stage` = 'pipeline'")
    page.goto(f"{ui_stack.mlflow_url}/#/experiments/{experiment.experiment_id}/runs/{run.info.run_id}",
              wait_until="load")
    sync_api.expect(page.get_by_text(run.info.run_name).first).to_be_visible()
    metric = page.get_by_text("test_roc_auc").first
    sync_api.expect(metric).to_be_visible()
    metric.scroll_into_view_if_needed()  # the run page scrolls inside its own pane, below the tags
    page.screenshot(path=SCREENSHOTS / "mlflow.png")
