"""A run uses a configured Prefect server, else `sgt ui`'s when it answers, else the shared one (`shared`, which
it starts if none answers) or a temporary one (`find`, `temporary`)."""

from __future__ import annotations

import json
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
def no_temporary_server(monkeypatch, tmp_path) -> list[str]:
    """Records a server's start (`--parent`: a temporary one; `--idle-minutes`: the shared one) instead of
    starting one; nothing configured; the Prefect home a fresh folder."""
    started: list[str] = []

    def start(self, owner, output, own):
        started.append(owner[0])
        return None, None

    monkeypatch.setattr(prefect_server, "configured_api_url", lambda: None)
    monkeypatch.setattr(prefect_server, "reap_orphaned_servers", lambda home: [])
    monkeypatch.setattr(prefect_server, "_prefect_home", lambda: tmp_path)
    monkeypatch.setattr(prefect_server.PrefectServer, "_start", start)
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
    assert no_temporary_server == ["--parent"]


def test_shared_starts_the_shared_server_when_none_answers(no_temporary_server):
    assert chosen("shared", "http://127.0.0.1:9/api").url is None  # the start was only recorded
    assert no_temporary_server == ["--idle-minutes"]


def test_shared_uses_the_server_an_earlier_run_recorded_while_it_answers(answering_server, no_temporary_server,
                                                                          tmp_path):
    (tmp_path / prefect_server.SHARED_RECORD).write_text(json.dumps({"url": answering_server, "pid": 1}))
    server = chosen("shared", "http://127.0.0.1:9/api")
    assert server.url == answering_server and no_temporary_server == []
    server.stop()  # its keep-alive thread ends
    (tmp_path / prefect_server.SHARED_RECORD).write_text(json.dumps({"url": "http://127.0.0.1:9/api", "pid": 1}))
    assert chosen("shared", "http://127.0.0.1:9/api").url is None and no_temporary_server == ["--idle-minutes"]


def test_a_failed_start_is_one_error_when_the_run_needs_the_server(monkeypatch):
    """The start runs on a thread of its own: its failure is raised, as one line, where the run waits for
    the server, never printed as a thread's traceback."""
    monkeypatch.setattr(prefect_server, "configured_api_url", lambda: None)
    monkeypatch.setattr(prefect_server, "reap_orphaned_servers", lambda home: [])

    def fail(self, owner, output, own):
        raise RuntimeError("no port left\nmore detail")

    monkeypatch.setattr(prefect_server.PrefectServer, "_start", fail)
    uncaught = []
    monkeypatch.setattr(threading, "excepthook", uncaught.append)
    server = prefect_server.choose_prefect_server("temporary")
    with pytest.raises(SGTError, match="Prefect's server: could not be started .RuntimeError: no port left"):
        server.ready()
    assert uncaught == []
