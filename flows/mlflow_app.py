"""MLflow's tracking server as `sgt ui` runs it: its own app, opening experiments on their runs table.

MLflow 3 opens every experiment in the view its UI-wide "GenAI / Model training" switch holds, remembered
per browser (localStorage `mlflow.workflowType_v1`) and GenAI until a user first picks otherwise; the
experiment's own `mlflow.experimentKind` tag, which SGT sets (flows/tracking.py), does not decide it in
3.17. So a new user met "Traces 0, No data available" instead of SGT's runs. This app is MLflow's own
(`mlflow.server.fastapi_app`), plus one line in the page it serves: a browser that never chose a view
starts on "Model training", and without the assistant panel open over the table; one that chose keeps its
choice. Registered as the MLflow app `sgt` (pyproject's `mlflow.app` entry point), so `mlflow ui
--app-name sgt` serves it.
"""

from __future__ import annotations

from flask import Response, request
from mlflow.server import app as flask_app
from mlflow.server.fastapi_app import create_fastapi_app

WORKFLOW_KEY = "mlflow.workflowType_v1"  # the UI's key: `${key}_v${version}`, its value JSON
MODEL_TRAINING_VIEW = "machine_learning"
# The assistant panel opens by itself on a browser's first visit, over a third of the runs table, unless this
# says it did already; it stays one click away.
ASSISTANT_OPENED_KEY = "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1"
DEFAULTS = {WORKFLOW_KEY: f'"{MODEL_TRAINING_VIEW}"', ASSISTANT_OPENED_KEY: "true"}
# Each only where nothing is stored: a user's own choice stays.
DEFAULT_VIEW_SCRIPT = "<script>try{" + "".join(
    f"if(localStorage.getItem({key!r})===null)localStorage.setItem({key!r},{value!r});"
    for key, value in DEFAULTS.items()) + "}catch(e){}</script>"


def with_default_view(response: Response) -> Response:
    """The UI's page (index.html) with `DEFAULT_VIEW_SCRIPT` first in its head; any other response as it is."""
    if request.endpoint != "serve" or response.status_code != 200 or response.mimetype != "text/html":
        return response
    response.direct_passthrough = False  # a file response streams; read it to edit it
    page = response.get_data(as_text=True)
    if DEFAULT_VIEW_SCRIPT not in page:
        response.set_data(page.replace("<head>", "<head>" + DEFAULT_VIEW_SCRIPT, 1))
    return response


flask_app.after_request(with_default_view)
app = create_fastapi_app(flask_app)
