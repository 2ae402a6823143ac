"""A run uses a configured Prefect server, else `sgt ui`'s when it answers (`find`), else a temporary one."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from flows import prefect_server


class _Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/api/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def answering_server():
    server = HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api"
    server.shutdown()


def test_find_uses_a_server_that_answers(answering_server, monkeypatch):
    monkeypatch.setattr(prefect_server, "configured_api_url", lambda: None)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert prefect_server.choose_prefect_server("find", found=answering_server) is None
    assert prefect_server.os.environ["PREFECT_API_URL"] == answering_server


def test_a_configured_server_comes_first(answering_server, monkeypatch):
    monkeypatch.setattr(prefect_server, "configured_api_url", lambda: "http://127.0.0.1:9/api")
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert prefect_server.choose_prefect_server("find", found=answering_server) is None
    assert "PREFECT_API_URL" not in prefect_server.os.environ  # left to Prefect's own settings


def test_a_server_that_does_not_answer_is_not_used(monkeypatch):
    """Nothing listens on the port: the health check fails at once and a temporary server is started."""
    monkeypatch.setattr(prefect_server, "configured_api_url", lambda: None)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    started = []
    monkeypatch.setattr(prefect_server, "_start_temporary_server", lambda: started.append(True))
    thread = prefect_server.choose_prefect_server("find", found="http://127.0.0.1:9/api")
    thread.join()
    assert started == [True] and "PREFECT_API_URL" not in prefect_server.os.environ


def test_a_failed_background_start_is_logged_not_raised_in_its_thread(monkeypatch, caplog):
    """The early start only gives the flow a head start: when Prefect's server does not come up (a busy
    machine past its startup timeout), the thread logs it and ends cleanly, and the flow's own start of
    the same server instance is where a lasting failure is reported."""
    from prefect.server.api.server import SubprocessASGIServer

    def time_out(self, timeout=None):
        raise RuntimeError("Timed out while attempting to connect to ephemeral Prefect API server.\nstdout: ...")

    monkeypatch.setattr(prefect_server, "configured_api_url", lambda: None)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr(SubprocessASGIServer, "start", time_out)
    uncaught = []
    monkeypatch.setattr(threading, "excepthook", uncaught.append)
    with caplog.at_level("WARNING", logger="sgt"):
        thread = prefect_server.choose_prefect_server("temporary")
        thread.join()
    assert uncaught == []
    assert ("Prefect's temporary server did not start in the background (Timed out while attempting to connect "
            "to ephemeral Prefect API server.); the flow starts it again") in caplog.messages
