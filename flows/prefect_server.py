"""The Prefect server a `sgt run` talks to: a configured one, one found running, else a temporary one of its own.

The temporary server runs in a process and a session of its own (`flows/temporary_server.py`): Ctrl-C in
the terminal reaches the run, which records its end in Prefect and then stops the server, instead of the
server dying first and the run retrying a dead API. It ends with the run however the run ends (its
watchdog sees a killed run gone), and a run that starts one first stops those earlier runs left behind.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from flows.ui import DEFAULT_PREFECT_PORT, prefect_api_url
from sgt_core.errors import SGTError

log = logging.getLogger("sgt")

# How long a server has to answer before a run gives up on it and starts its own: a local one answers
# its health check in milliseconds.
HEALTH_TIMEOUT_S = 0.5
STOP_TIMEOUT_S = 5.0
PORT_ATTEMPTS = 3  # a free port can be taken by another process before the server binds it
# What a temporary Prefect server's command line holds: Prefect's own (`SubprocessASGIServer`, as earlier
# SGT versions started it) and ours.
PREFECT_APP = "prefect.server.api.server:create_app"
OUR_MODULE = "flows.temporary_server"


def _answers(api_url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{api_url}/health", timeout=HEALTH_TIMEOUT_S).status_code == 200
    except httpx.HTTPError:
        return False


def configured_api_url() -> str | None:
    """$PREFECT_API_URL, or the API URL of the active Prefect profile."""
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PrefectServer:
    """The server this run's flows report to, chosen (and a temporary one started) on a thread of its own,
    so that the choice overlaps the run's imports and checks; `ready` before the flow, `stop` at the end."""

    def __init__(self, policy: str, found: str) -> None:
        self.url: str | None = None  # an API URL this run chose (None: Prefect's own settings decide)
        self.process: subprocess.Popen | None = None
        self._output = tempfile.TemporaryFile()  # noqa: SIM115 - the server writes it as long as it runs
        self._lock = threading.Lock()
        self._stopped = False
        self._error: SGTError | None = None
        # Prefect's settings are imported here, on the caller's thread, before the choosing thread starts:
        # the caller imports Prefect's engine meanwhile, and two threads importing Prefect at once can meet in
        # its circular imports, which Python ends with a _DeadlockError in one of them (it failed a run of
        # the test suite once). Importing is serial anyway (one import lock per module, one GIL).
        import prefect.settings  # noqa: F401
        self._thread = threading.Thread(target=self._choose, args=(policy, found), name="sgt-prefect-server",
                                        daemon=True)
        self._thread.start()

    def _choose(self, policy: str, found: str) -> None:
        try:
            if configured_api_url():
                return
            if policy == "find" and _answers(found):
                self.url = found
                log.info("using the Prefect server at %s (orchestration.prefect_server=find)", found)
                return
            reap_orphaned_servers(_prefect_home())
            self._start_temporary()
        except SGTError as error:
            self._error = error
        except Exception as error:  # noqa: BLE001 - a thread's traceback would be lost: `ready` reports it
            self._error = SGTError(f"Prefect's temporary server: could not be started ({type(error).__name__}: {error})")

    def _start_temporary(self) -> None:
        from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, get_current_settings

        environment = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
                       "PREFECT__SERVER_FINAL": "1",
                       **get_current_settings().to_environment_variables(exclude_unset=True)}
        environment.pop("PREFECT_API_URL", None)
        timeout_s = float(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
        for _ in range(PORT_ATTEMPTS):
            port = _free_port()
            with self._lock:
                if self._stopped:
                    return
                self.process = subprocess.Popen(
                    [sys.executable, "-m", OUR_MODULE, "--port", str(port), "--parent", str(os.getpid())],
                    env=environment, stdout=self._output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True,  # the terminal's Ctrl-C is the run's to handle, not the server's
                )
            url = prefect_api_url(port)
            deadline = time.monotonic() + timeout_s
            while self.process.poll() is None and time.monotonic() < deadline:
                if _answers(url):
                    self.url = url
                    log.info("started a temporary Prefect server at %s (stopped when this run ends)", url)
                    return
                time.sleep(0.1)
            if self._stopped:
                return
            if self.process.poll() is None:
                self.stop()
                raise SGTError(f"Prefect's temporary server: no answer at {url} after {timeout_s:.0f} s "
                               "(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)")
            if "address already in use" not in self._tail().lower():
                break
        raise SGTError(f"Prefect's temporary server: exited with status {self.process.returncode} before answering "
                       f"({self._tail().splitlines()[-1] if self._tail() else 'no output'})")

    def _tail(self) -> str:
        self._output.seek(0)
        return self._output.read()[-4000:].decode(errors="replace").strip()

    def ready(self) -> None:
        """Waits for the choice, and a temporary server's start; points this process's Prefect at the server."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self.url is not None and os.environ.get("PREFECT_API_URL") != self.url:
            from prefect.context import refresh_global_settings_context

            os.environ["PREFECT_API_URL"] = self.url  # Prefect reads its settings once: refreshed below
            refresh_global_settings_context()

    def stop(self) -> None:
        """Stops the temporary server now, whether it is up or still starting (SIGTERM, then SIGKILL)."""
        with self._lock:
            self._stopped = True
            process = self.process
        if process is None or process.poll() is not None:
            return
        for signum in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, signum)  # its session: the server and anything it started
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
                break
            except subprocess.TimeoutExpired:
                continue
        process.wait()


def choose_prefect_server(policy: str, found: str = prefect_api_url(DEFAULT_PREFECT_PORT)) -> PrefectServer:
    """Chooses the Prefect server the run's flows report to, in the background; `ready()` it before the flow.

    `orchestration.prefect_server`:
      - a server configured in $PREFECT_API_URL or the Prefect profile is always used as it is;
      - `find` also looks for `sgt ui`'s server (http://127.0.0.1:4200/api) and uses it when it answers,
        so that runs appear in the UI that is open and no server starts (~5 s of every run);
      - otherwise (and with `temporary`) a temporary server of this run's own starts now, in the
        background, so that its start overlaps the run's own imports and checks. It keeps its database
        under $PREFECT_HOME, as Prefect's own temporary server does, so a later run sees this one's flow runs.
    `stop()` it when the run ends, however it ends.
    """
    return PrefectServer(policy, found)


def _prefect_home() -> Path:
    from prefect.settings import get_current_settings

    return Path(get_current_settings().home).expanduser().resolve()


def _home_of(environment: dict[str, str]) -> Path:
    """The Prefect home a process with this environment uses."""
    home = environment.get("PREFECT_HOME") or str(Path(environment.get("HOME", "~")) / ".prefect")
    return Path(home).expanduser().resolve()


def _is_orphan(process, command: list[str]) -> bool:
    """Whether a temporary server's run is gone: ours name their run; Prefect's own were its children."""
    import psutil

    if OUR_MODULE in command:
        parent = command[command.index("--parent") + 1] if "--parent" in command else ""
        return not parent.isdigit() or process.ppid() != int(parent)
    if process.ppid() <= 1:
        return True
    try:  # re-parented to a subreaper (systemd --user, a container's init): no Python process of a run
        parent = process.parent()
        return parent is None or "python" not in " ".join([parent.name(), *parent.cmdline()[:1]]).lower()
    except psutil.NoSuchProcess:
        return True


def reap_orphaned_servers(home: Path) -> list[int]:
    """Stops the temporary Prefect servers of this user and Prefect home whose run has ended: left by a run
    that was killed outright before this version's servers watched for it (Prefect's own temporary server),
    or that outlived their watchdog. Servers of live runs, of other users and of other Prefect homes (their
    own databases) are left alone. Returns the pids it stopped."""
    import psutil

    orphans = []
    for process in psutil.process_iter(["cmdline", "uids"]):
        try:
            command = process.info["cmdline"] or []
            if (process.info["uids"] is None or process.info["uids"].real != os.getuid()
                    or not any(PREFECT_APP in part or OUR_MODULE == part for part in command)
                    or not _is_orphan(process, command)):
                continue
            environment = process.environ()
            if environment.get("PREFECT__SERVER_EPHEMERAL") == "1" and _home_of(environment) == home:
                process.terminate()
                orphans.append(process)
        except psutil.Error:  # ended meanwhile, or not ours to read
            continue
    _, alive = psutil.wait_procs(orphans, timeout=STOP_TIMEOUT_S)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    if orphans:
        log.warning("stopped %d temporary Prefect server(s) left running by earlier runs that ended (pid %s)",
                    len(orphans), ", ".join(str(process.pid) for process in orphans))
    return [process.pid for process in orphans]
