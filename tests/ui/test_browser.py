"""Headless Chromium loads the Prefect UI and the MLflow UI and finds the deployment and the run in them."""

from __future__ import annotations

import io
import time

import pytest
from mlflow.tracking import MlflowClient

from flows.mlflow_app import MODEL_TRAINING_VIEW, WORKFLOW_KEY
from flows.serve import DEPLOYMENT_NAME, sgt_run
from flows.tracking import EXPERIMENT_KIND_TAG, MODEL_TRAINING
from tests.conftest import REPO_ROOT
from tests.ui.chromium import ChromiumNotFound, find_chromium, required

pytestmark = pytest.mark.ui

# Debian's chromium, or $CHROMIUM (tests/ui/chromium.py). When CHROMIUM names one (.ci/run sets it), a missing
# browser or Playwright fails these tests rather than skipping them: a CI run must not pass without them.
try:
    CHROMIUM = find_chromium()
except ChromiumNotFound as error:
    if required():
        raise
    pytest.skip(str(error), allow_module_level=True)
if required():
    from playwright import sync_api
else:
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


def wait_until_drawn(canvas, timeout_s: float = PAGE_TIMEOUT_MS / 1000) -> None:
    """Waits until two successive pictures of `canvas` agree and hold more than two colours (a blank has one).

    The run graph draws its nodes with WebGL, animating them in, and puts nothing of them in the DOM: its
    pixels are all there is to wait on.
    """
    from PIL import Image

    deadline, previous = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        picture = canvas.screenshot()
        colours = Image.open(io.BytesIO(picture)).convert("RGB").getcolors(maxcolors=2)  # None: more than 2
        if picture == previous and colours is None:
            return
        previous = picture
        time.sleep(0.5)
    raise AssertionError(f"the flow run graph was not drawn within {timeout_s:.0f} s")


def test_prefect_ui_shows_the_deployment_and_the_run(page, ui_stack, served_run):
    page.goto(f"{ui_stack.prefect_url}/deployments", wait_until="load")
    sync_api.expect(page.get_by_text(sgt_run.name, exact=True).first).to_be_visible()
    sync_api.expect(page.get_by_text(DEPLOYMENT_NAME, exact=True).first).to_be_visible()
    # the UI reaches its API on the port it was started on, not Prefect's default 4200
    sync_api.expect(page.get_by_text("Can't connect to Server API")).to_have_count(0)
    # `sgt serve` registers the stage deployments only with --pools; the one it serves is Ready
    sync_api.expect(page.get_by_text("Ready", exact=True).first).to_be_visible()
    sync_api.expect(page.get_by_text("Not Ready", exact=True)).to_have_count(0)
    page.screenshot(path=SCREENSHOTS / "prefect.png")

    # The graph draws from its own request, after the page's; wait for its answer, then for the drawing.
    graph_url = f"/api/flow_runs/{served_run.id}/graph-v2"
    with page.expect_response(lambda response: response.url.endswith(graph_url)) as graph:
        page.goto(f"{ui_stack.prefect_url}/runs/flow-run/{served_run.id}", wait_until="load")
    assert graph.value.ok, f"{graph_url}: status {graph.value.status}"
    sync_api.expect(page.get_by_text(served_run.name).first).to_be_visible()
    sync_api.expect(page.get_by_text("Completed").first).to_be_visible()
    canvas = page.locator(".flow-run-graph canvas").first
    sync_api.expect(canvas).to_be_visible()
    wait_until_drawn(canvas)
    page.screenshot(path=SCREENSHOTS / "prefect_run.png")


def test_mlflow_ui_opens_the_experiment_on_its_runs(page, ui_stack, served_run):
    client = MlflowClient(ui_stack.tracking_uri)
    experiment = client.get_experiment_by_name("sgt-minesweeper")
    assert experiment.tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING
    (run,) = client.search_runs([experiment.experiment_id], "tags.`sgt.stage` = 'pipeline'")
    experiment_url = f"{ui_stack.mlflow_url}/#/experiments/{experiment.experiment_id}"

    # A fresh browser profile, which never chose a view, on the experiment's plain address: `sgt ui`'s MLflow
    # app (flows/mlflow_app.py) starts it on "Model training", its runs table, the assistant panel closed.
    page.goto(experiment_url, wait_until="load")
    sync_api.expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()
    assert page.evaluate(f"localStorage.getItem({WORKFLOW_KEY!r})") == f'"{MODEL_TRAINING_VIEW}"'
    # the assistant's panel (its greeting) not opened by itself over the table
    sync_api.expect(page.get_by_text("Ask questions about your experiments", exact=False)).to_be_hidden()

    sync_api.expect(page.get_by_text(run.info.run_name).first).to_be_visible()
    # not the GenAI overview of traces, empty for SGT's experiments
    sync_api.expect(page.get_by_text("No data available", exact=False)).to_have_count(0)
    page.screenshot(path=SCREENSHOTS / "mlflow_runs.png")

    page.goto(f"{experiment_url}/runs/{run.info.run_id}", wait_until="load")
    sync_api.expect(page.get_by_text(run.info.run_name).first).to_be_visible()
    metric = page.get_by_text("test_roc_auc").first
    sync_api.expect(metric).to_be_visible()
    metric.scroll_into_view_if_needed()  # the run page scrolls inside its own pane, below the tags
    page.screenshot(path=SCREENSHOTS / "mlflow.png")
