"""The process of a run's temporary Prefect server: Prefect's API under uvicorn, ending with the run.

`python -m flows.temporary_server --port P --parent PID` serves what Prefect's own temporary server serves
(`prefect.server.api.server:create_app`, no UI), started by `flows/prefect_server.py` in a session of its
own, so that the terminal's Ctrl-C does not stop it before the run has recorded its end. It stops when the
run stops it, or, should the run be killed outright, when its watchdog sees the run gone (SIGTERM to
itself: uvicorn shuts down as on Ctrl-C). It cannot take PR_SET_PDEATHSIG: the run starts it from a
thread that ends long before the run does.
"""

from __future__ import annotations

import argparse
import signal
import sys

APP = "prefect.server.api.server:create_app"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.temporary_server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True, help="the run's pid: the server ends with it")
    args = parser.parse_args(argv)

    from sgt_core.lifeline import end_with

    if not end_with(args.parent, signal.SIGTERM, death_signal=False):
        return 0  # the run ended while this process started
    import uvicorn

    uvicorn.run(APP, factory=True, host="127.0.0.1", port=args.port, log_level="error", lifespan="on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
