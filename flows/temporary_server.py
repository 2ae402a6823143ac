"""The process of a Prefect server that SGT starts: a run's temporary one, or the shared one that outlives runs.

`python -m flows.temporary_server --port P --parent PID` serves what Prefect's own temporary server serves
(`prefect.server.api.server:create_app`, no UI), started by `flows/prefect_server.py` in a session of its
own, so that the terminal's Ctrl-C does not stop it before the run has recorded its end. It stops when the
run stops it, or, should the run be killed outright, when its watchdog sees the run gone (SIGTERM to
itself: uvicorn shuts down as on Ctrl-C). It cannot take PR_SET_PDEATHSIG: the run starts it from a
thread that ends long before the run does.

`--idle-minutes M` instead of `--parent` makes it the shared server (`orchestration.prefect_server=shared`):
it belongs to no run and stops itself once no request has come for M minutes. A run using it asks its
health every `KEEP_ALIVE_S` while it lasts, so that a stage computing for hours without a word to Prefect
does not see its server go.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

APP = "prefect.server.api.server:create_app"
KEEP_ALIVE_S = 60.0  # how often a run asks the shared server's health (flows/prefect_server.py)
SHARED_OPTION = "--idle-minutes"  # on a server's command line: the shared one (no run owns it)


def stop_when_idle(app, idle_s: float):
    """`app` (ASGI) noting each request's time; a thread sends this process SIGTERM after `idle_s` without one."""
    last = [time.monotonic()]

    async def noted(scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            last[0] = time.monotonic()
        await app(scope, receive, send)

    def watch() -> None:
        while True:
            time.sleep(min(30.0, idle_s / 4))
            if time.monotonic() - last[0] > idle_s:
                os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's graceful shutdown
                return

    threading.Thread(target=watch, name="sgt-idle-watch", daemon=True).start()
    return noted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.temporary_server")
    parser.add_argument("--port", type=int, required=True)
    owner = parser.add_mutually_exclusive_group(required=True)
    owner.add_argument("--parent", type=int, help="the run's pid: the server ends with it")
    owner.add_argument(SHARED_OPTION, type=float, help="the shared server: it ends after this long unused")
    args = parser.parse_args(argv)

    import uvicorn

    if args.parent is not None:
        from sgt_core.lifeline import end_with

        if not end_with(args.parent, signal.SIGTERM, death_signal=False):
            return 0  # the run ended while this process started
        uvicorn.run(APP, factory=True, host="127.0.0.1", port=args.port, log_level="error", lifespan="on")
        return 0
    from prefect.server.api.server import create_app

    app = stop_when_idle(create_app(), 60.0 * args.idle_minutes)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="error", lifespan="on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
