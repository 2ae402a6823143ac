"""`sgt ui`'s MLflow app: MLflow's own, whose page starts a browser that never chose a view on its runs table."""

from __future__ import annotations

from importlib.metadata import entry_points

from flows.mlflow_app import (
    ASSISTANT_OPENED_KEY,
    DEFAULT_VIEW_SCRIPT,
    MODEL_TRAINING_VIEW,
    WORKFLOW_KEY,
    flask_app,
)
from flows.ui import ui_commands


def test_the_page_sets_the_model_training_view_only_where_none_is_stored():
    page = flask_app.test_client().get("/")
    assert page.status_code == 200 and page.mimetype == "text/html"
    html = page.get_data(as_text=True)
    assert html.count(DEFAULT_VIEW_SCRIPT) == 1 and html.index(DEFAULT_VIEW_SCRIPT) < html.index("</head>")
    # the UI's key and its JSON value; set only when getItem finds nothing (a user's choice stays)
    assert f"localStorage.getItem('{WORKFLOW_KEY}')===null" in DEFAULT_VIEW_SCRIPT
    assert f"setItem('{WORKFLOW_KEY}','\"{MODEL_TRAINING_VIEW}\"')" in DEFAULT_VIEW_SCRIPT
    assert f"localStorage.getItem('{ASSISTANT_OPENED_KEY}')===null" in DEFAULT_VIEW_SCRIPT


def test_other_responses_are_mlflows_own():
    health = flask_app.test_client().get("/health")
    assert health.status_code == 200 and DEFAULT_VIEW_SCRIPT not in health.get_data(as_text=True)


def test_sgt_ui_runs_mlflow_with_this_app():
    (registered,) = [point for point in entry_points(group="mlflow.app") if point.name == "sgt"]
    assert registered.value == "flows.mlflow_app:app"
    command = ui_commands(4200, 5000, "sqlite:///mlflow.db")["mlflow"]
    assert command[command.index("--app-name") + 1] == "sgt"
