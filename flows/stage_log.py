"""A computing stage's log file: its log records and, when it fails, the whole error, kept on disk and in MLflow."""

from __future__ import annotations

import logging
import traceback
from pathlib import Path

from flows.hooks import StageHooks, StageRun
from flows.tracking import Tracker
from sgt_core.pipeline import StageResult

LOGS_FOLDER = "logs"  # <artifacts>/logs/<stage>/<MLflow run id>.log; `logs/<stage>.log` on the stage's MLflow run
LOG_FILE_TAG = "sgt.log_file"
FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class _QuietFileHandler(logging.FileHandler):
    """A file handler that stops writing, silently, once the file cannot be written (a full disk): the log
    must never print a traceback of its own beside the run's one-line error."""

    def handleError(self, record: logging.LogRecord) -> None:
        self.close()
        logging.getLogger().removeHandler(self)


class StageLog(StageHooks):
    """Writes what a computing stage logs to `<root>/logs/<stage>/<run id>.log`, and when it fails the error
    with everything behind it (a failed DDP rank's traceback and torchrun's report, or the traceback): the
    terminal gets one line, the file the rest. The file goes to the stage's MLflow run as `logs/<stage>.log`,
    and its path into the run's tag `sgt.log_file`. A cache hit runs nothing and gets no file.
    """

    def __init__(self, tracker: Tracker, root: Path) -> None:
        self.tracker, self.folder = tracker, Path(root).resolve() / LOGS_FOLDER
        self.path: Path | None = None
        self.handler: logging.Handler | None = None

    def before_stage(self, run: StageRun) -> None:
        if run.cache_hit or not run.run_id:
            return
        path = self.folder / run.stage.name / f"{run.run_id}.log"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.handler = _QuietFileHandler(path, encoding="utf-8")
        except OSError:  # a folder that cannot be written: the stage's own writes report it
            return
        self.handler.setFormatter(logging.Formatter(FORMAT))
        self.handler.setLevel(logging.INFO)
        logging.getLogger().addHandler(self.handler)
        self.path = path
        self.tracker.set_tags(run.run_id, {LOG_FILE_TAG: str(path)})

    def after_stage(self, run: StageRun, result: StageResult) -> None:
        if self._close():
            self.tracker.later(run.run_id, self.tracker.log_artifact, run.run_id, self.path, LOGS_FOLDER)

    def on_stage_error(self, run: StageRun, error: BaseException) -> None:
        if self.handler is not None:
            details = getattr(error, "details", "") or "".join(traceback.format_exception(error))
            self.handler.handle(logging.LogRecord("sgt", logging.ERROR, __file__, 0, "%s failed: %s: %s\n%s",
                                                  (run.stage.name, type(error).__name__, error, details), None))
        if not self._close():
            return
        try:  # now, not on the logging thread: the run is ending, and its error must not wait for an upload
            self.tracker.log_artifact(run.run_id, self.path, LOGS_FOLDER)
        except Exception as upload:  # noqa: BLE001 - the stage's error is the one to report
            logging.getLogger("sgt").warning("%s: its log %s could not be kept in MLflow (%s)", run.stage.name,
                                             self.path, upload)
        if getattr(error, "details", ""):  # the one line says where the rest is
            error.add_note(f"the stage's log: {self.path}")

    def _close(self) -> bool:
        """Stops writing the file; whether there is one to keep."""
        handler, self.handler = self.handler, None
        if handler is None:
            return False
        logging.getLogger().removeHandler(handler)
        handler.close()
        return self.path is not None and self.path.is_file()
