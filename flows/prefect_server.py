"""The Prefect server a `sgt run` talks to: a configured one, one found running, the shared one, or a temporary one.

The servers SGT starts run in a process and a session of their own (`flows/temporary_server.py`), so that
Ctrl-C in the terminal reaches the run, which records its end in Prefect, instead of the server dying first
and the run retrying a dead API. The shared server (the default) outlives the run that started it: the runs
that follow use it, and it stops itself after `orchestration.shared_server_idle_minutes` unused, so that a
run no longer pays a server's start (seconds of both cores) every time. A temporary server is one run's
own: it ends with the run however the run ends (its watchdog sees a killed run gone), and a run that starts
one first stops those earlier runs left behind.
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

from flows.temporary_server import KEEP_ALIVE_S, SHARED_OPTION
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
# Under $PREFECT_HOME: the shared server's address and pid (for the runs that follow), and its output.
SHARED_RECORD = "sgt-shared-server.json"
SHARED_LOG = "sgt-shared-server.log"


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
    """The server this run's flows report to, chosen (and a temporary or the shared one started) on a thread of
    its own, so that the choice overlaps the run's imports and checks; `ready` before the flow, `stop` at the end."""

    def __init__(self, policy: str, found: str, idle_minutes: float = 15.0) -> None:
        self.url: str | None = None  # an API URL this run chose (None: Prefect's own settings decide)
        self.process: subprocess.Popen | None = None  # a temporary server: this run's to stop
        self._output = tempfile.TemporaryFile()  # noqa: SIM115 - the server writes it as long as it runs
        self._lock = threading.Lock()
        self._stopped = False
        self._ended = threading.Event()  # the run's end: the shared server's keep-alive stops
        self._error: SGTError | None = None
        self._idle_minutes = idle_minutes
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
            if policy in ("shared", "find") and _answers(found):
                self.url = found
                log.info("using the Prefect server at %s (orchestration.prefect_server=%s)", found, policy)
                return
            if policy == "shared":
                self._use_shared(_prefect_home())
                return
            reap_orphaned_servers(_prefect_home())
            process, self.url = self._start(["--parent", str(os.getpid())], self._output, own=True)
            if process is not None:
                log.info("started a temporary Prefect server at %s (stopped when this run ends)", self.url)
        except SGTError as error:
            self._error = error
        except Exception as error:  # noqa: BLE001 - a thread's traceback would be lost: `ready` reports it
            self._error = SGTError(f"Prefect's server: could not be started ({type(error).__name__}: {error})")

    def _use_shared(self, home: Path) -> None:
        """The shared server an earlier run started, if it answers, else a new one (recorded for later runs);
        one run at a time decides (a file lock), so that runs starting together share one server."""
        import json

        from filelock import FileLock

        record = home / SHARED_RECORD
        home.mkdir(parents=True, exist_ok=True)
        with FileLock(record.with_name(record.name + ".lock")):
            try:
                url = json.loads(record.read_text())["url"]
            except (OSError, ValueError, KeyError, TypeError):
                url = None
            if url is not None and _answers(url):
                log.info("using the shared Prefect server at %s", url)
            else:
                reap_orphaned_servers(home)
                with open(home / SHARED_LOG, "a+b") as output:  # the server keeps writing it after this run
                    process, url = self._start([SHARED_OPTION, f"{self._idle_minutes:g}"], output, own=False)
                if process is None:  # this run was stopped meanwhile
                    return
                atomic = record.with_name(record.name + f".{os.getpid()}.tmp")
                atomic.write_text(json.dumps({"url": url, "pid": process.pid}))
                atomic.replace(record)
                log.info("started the shared Prefect server at %s: later runs use it too, and it stops after %g "
                         "minutes unused (orchestration.prefect_server=temporary starts one per run instead)",
                         url, self._idle_minutes)
        self.url = url
        threading.Thread(target=self._keep_alive, args=(url,), name="sgt-prefect-keep-alive", daemon=True).start()

    def _keep_alive(self, url: str) -> None:
        """Asks the shared server's health every KEEP_ALIVE_S until the run ends: a request resets its idle time."""
        while not self._ended.wait(KEEP_ALIVE_S):
            _answers(url)

    def _start(self, owner: list[str], output, own: bool) -> tuple[subprocess.Popen | None, str | None]:
        """Starts a server process (`flows/temporary_server.py` with `owner`'s arguments) writing to `output`,
        on a free port, and waits until it answers; (None, None) if the run was stopped meanwhile. `own`: the
        run's to stop (a temporary server), else left running (the shared one)."""
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
                    return None, None
                process = subprocess.Popen(
                    [sys.executable, "-m", OUR_MODULE, "--port", str(port), *owner],
                    env=environment, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True,  # the terminal's Ctrl-C is the run's to handle, not the server's
                )
                if own:
                    self.process = process
            url = prefect_api_url(port)
            deadline = time.monotonic() + timeout_s
            while process.poll() is None and time.monotonic() < deadline:
                if _answers(url):
                    return process, url
                time.sleep(0.1)
            if own and self._stopped:
                return None, None
            if process.poll() is None:
                _stop_process(process)
                raise SGTError(f"Prefect's server: no answer at {url} after {timeout_s:.0f} s "
                               "(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)")
            if "address already in use" not in _tail(output).lower():
                break
        raise SGTError(f"Prefect's server: exited with status {process.returncode} before answering "
                       f"({_tail(output).splitlines()[-1] if _tail(output) else 'no output'})")

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
        """Stops a temporary server now, whether it is up or still starting (SIGTERM, then SIGKILL), and the
        shared server's keep-alive (the shared server itself stays for later runs)."""
        self._ended.set()
        with self._lock:
            self._stopped = True
            process = self.process
        if process is not None:
            _stop_process(process)


def _stop_process(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL, to a server's session: the server and anything it started."""
    if process.poll() is not None:
        return
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
            break
        except subprocess.TimeoutExpired:
            continue
    process.wait()


def _tail(output) -> str:
    """The last lines a server process wrote to `output` (a file it shares)."""
    output.flush()
    with open(output.fileno(), "rb", closefd=False) as reader:
        reader.seek(max(0, os.fstat(output.fileno()).st_size - 4000))
        return reader.read().decode(errors="replace").strip()


def choose_prefect_server(policy: str, found: str = prefect_api_url(DEFAULT_PREFECT_PORT),
                          idle_minutes: float = 15.0) -> PrefectServer:
    """Chooses the Prefect server the run's flows report to, in the background; `ready()` it before the flow.

    `orchestration.prefect_server`:
      - a server configured in $PREFECT_API_URL or the Prefect profile is always used as it is;
      - `shared` and `find` look for `sgt ui`'s server (http://127.0.0.1:4200/api) and use it when it answers,
        so that runs appear in the UI that is open and no server starts;
      - `shared` (the default) then uses the server an earlier run started and left for later ones (its
        address under $PREFECT_HOME), else starts it: it stays up after this run and stops itself after
        `idle_minutes` without a request (the runs using it ask its health every minute);
      - otherwise (`find`, `temporary`) a temporary server of this run's own starts.
    Either starts in the background, so that its start overlaps the run's own imports and checks, and keeps
    its database under $PREFECT_HOME, as Prefect's own temporary server does, so a later run sees this one's
    flow runs. `stop()` it when the run ends, however it ends.
    """
    return PrefectServer(policy, found, idle_minutes)


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
        if SHARED_OPTION in command:  # the shared server: no run's, it ends when unused
            return False
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
