"""A run uses a configured Prefect server, else `sgt ui`'s when it answers (`find`), else a temporary one."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from flows import prefect_server
from sgt_core.errors import SGTError


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


@pytest.fixture
def no_temporary_server(monkeypatch) -> list[bool]:
    """Records a temporary server's start instead of starting one; nothing configured."""
    started: list[bool] = []
    monkeypatch.setattr(prefect_server, "configured_api_url", lambda: None)
    monkeypatch.setattr(prefect_server, "reap_orphaned_servers", lambda home: [])
    monkeypatch.setattr(prefect_server.PrefectServer, "_start_temporary", lambda self: started.append(True))
    return started


def chosen(policy: str, found: str) -> prefect_server.PrefectServer:
    """The choice made, without `ready()`, which would point this test process's Prefect at it."""
    server = prefect_server.choose_prefect_server(policy, found=found)
    server._thread.join()
    return server


def test_find_uses_a_server_that_answers(answering_server, no_temporary_server):
    assert chosen("find", answering_server).url == answering_server
    assert no_temporary_server == []


def test_a_configured_server_comes_first(answering_server, no_temporary_server, monkeypatch):
    monkeypatch.setattr(prefect_server, "configured_api_url", lambda: "http://127.0.0.1:9/api")
    assert chosen("find", answering_server).url is None  # left to Prefect's own settings
    assert no_temporary_server == []


def test_a_server_that_does_not_answer_is_not_used(no_temporary_server):
    """Nothing listens on the port: the health check fails at once and a temporary server is started."""
    assert chosen("find", "http://127.0.0.1:9/api").url is None
    assert no_temporary_server == [True]


def test_a_failed_start_is_one_error_when_the_run_needs_the_server(monkeypatch):
    """The start runs on a thread of its own: its failure is raised, as one line, where the run waits for
    the server, never printed as a thread's traceback."""
    monkeypatch.setattr(prefect_server, "configured_api_url", lambda: None)
    monkeypatch.setattr(prefect_server, "reap_orphaned_servers", lambda home: [])

    def fail(self):
        raise RuntimeError("no port left\nmore detail")

    monkeypatch.setattr(prefect_server.PrefectServer, "_start_temporary", fail)
    uncaught = []
    monkeypatch.setattr(threading, "excepthook", uncaught.append)
    server = prefect_server.choose_prefect_server("temporary")
    with pytest.raises(SGTError, match="Prefect's temporary server: could not be started .RuntimeError: no port left"):
        server.ready()
    assert uncaught == []
