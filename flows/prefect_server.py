"""The Prefect server a `sgt run` talks to: a configured one, one found running, else a temporary one started early."""

from __future__ import annotations

import logging
import os
import threading

from flows.ui import DEFAULT_PREFECT_PORT, prefect_api_url

log = logging.getLogger("sgt")

# How long a server has to answer before a run gives up on it and starts its own: a local one answers
# its health check in milliseconds.
HEALTH_TIMEOUT_S = 0.5


def _answers(api_url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{api_url}/health", timeout=HEALTH_TIMEOUT_S).status_code == 200
    except httpx.HTTPError:
        return False


def _start_temporary_server() -> None:
    from prefect.server.api.server import SubprocessASGIServer

    try:
        SubprocessASGIServer().start()  # the instance Prefect's client takes when no API URL is set
    except Exception as error:  # noqa: BLE001 - a head start only: raised here it would be a thread's traceback
        # Prefect's client starts the same instance again when the flow needs it, and a failure then is the
        # flow's own error, reported where the run is
        first_line = (str(error).splitlines() or [type(error).__name__])[0]
        log.warning("Prefect's temporary server did not start in the background (%s); the flow starts it again",
                    first_line)


def configured_api_url() -> str | None:
    """$PREFECT_API_URL, or the API URL of the active Prefect profile."""
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or None


def choose_prefect_server(policy: str, found: str = prefect_api_url(DEFAULT_PREFECT_PORT)) -> threading.Thread | None:
    """Points Prefect at a server before the flow starts; returns the thread starting a temporary one, if any.

    `orchestration.prefect_server`:
      - a server configured in $PREFECT_API_URL or the Prefect profile is always used as it is;
      - `find` also looks for `sgt ui`'s server (http://127.0.0.1:4200/api) and uses it when it answers,
        so that runs appear in the UI that is open and no server starts (~5 s of every run);
      - otherwise (and with `temporary`) Prefect's temporary server is started now, in the background,
        so that its start overlaps the run's own imports and checks rather than following them.
    Join the returned thread before the flow runs: the flow would otherwise start a second server.
    """
    if configured_api_url():
        return None
    if policy == "find" and _answers(found):
        os.environ["PREFECT_API_URL"] = found
        log.info("using the Prefect server at %s (orchestration.prefect_server=find)", found)
        return None

    thread = threading.Thread(target=_start_temporary_server, name="sgt-prefect-server", daemon=True)
    thread.start()
    return thread


def stop_temporary_server(thread: threading.Thread) -> None:
    """Stops the temporary server `choose_prefect_server` started, once it is up: for a run that fails its
    checks after the server's start began (a stopped server is not left to the interpreter's exit)."""
    from prefect.server.api.server import SubprocessASGIServer

    thread.join()
    SubprocessASGIServer().stop()
