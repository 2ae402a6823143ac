"""`sgt tune`: the tuning loop, an Optuna study whose trials are pipeline runs nested in one MLflow run.

One concept, kept in one file although it is long: the study, from its search space to the best trial's preset.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import socket
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from mlflow.entities import Metric
from mlflow.exceptions import MlflowException
from optuna.trial import FrozenTrial, TrialState
from prefect import flow, runtime

from flows.flow_runs import claim_flow_run, crash_flow_runs_of_dead_processes
from flows.interrupts import is_interrupt
from flows.pipeline import sgt_pipeline
from flows.tracking import Tracker, flatten, owner_tags
from sgt_core.artifacts import atomic_path, fingerprint, is_url, process_exists
from sgt_core.config import compose_config, config_dir
from sgt_core.config.section import ConfigProblems
from sgt_core.config.tune import (
    DEPTH_PATH,
    FOLLOWS_DEPTH,
    Choices,
    Distribution,
    FloatRange,
    IntRange,
    PerLayer,
    TuneConfig,
    missing_paths,
)
from sgt_core.errors import ConfigError
from sgt_core.pipeline import STAGES, dataset_id
from sgt_core.train.evaluation_listeners import Listener, listening

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger("sgt")

STUDIES_FOLDER = "tune"  # <paths.artifacts>/tune/<study>.db
TUNING_STAGE = "tuning"  # the tuning run's `sgt.stage`
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)  # the trials that count towards tune.trials
# Pruning hears the train stage's epochs only in this process (sgt_core/train/evaluation_listeners.py): a
# stage in a process of its own (stage_isolation=process) would train every trial to its last epoch.
INLINE = "stage_isolation=inline"
HYDRA_WORDS = ("null", "true", "false", "nan", "inf")  # strings that Hydra reads as other values unless quoted
# Top-level keys that say where results go or how a run is carried out, not what it computes: they enter
# neither the study's name (a resumed study may move or change them) nor a preset.
RUN_OPTIONS = ("tune", "paths", "mlflow", "stage", "stage_isolation", "orchestration")
# Trials in a row whose configuration is invalid before the study gives up: its space keeps missing.
MAX_INVALID_IN_A_ROW = 10
RUN_ID_ATTR = "mlflow_run_id"  # the study's user attribute naming its tuning run
# The sections a stage reads, hence what a preset must reproduce of the best trial.
STAGE_SECTIONS = tuple(dict.fromkeys(section for stage in STAGES for section in stage.config_sections))


def check_tuning(cfg: dict) -> TuneConfig:
    """What `sgt tune` needs besides a valid configuration: the space's keys in it, a local artifacts
    folder for the study's sqlite file, and every stage in this process (orchestration=local).

    Raises:
        ConfigProblems: one line naming each problem.
    """
    tune = TuneConfig.from_dict(cfg["tune"])
    problems = missing_paths(tune.distributions, cfg)
    if is_url(cfg["paths"]["artifacts"]):
        problems.append(("paths.artifacts", ("sgt tune keeps its Optuna study in a sqlite file under the "
                                             f"artifacts folder; give a local folder, found "
                                             f"{cfg['paths']['artifacts']}")))
    if cfg["orchestration"]["mode"] != "local":
        problems.append(("orchestration", ("sgt tune runs its trials' stages in its own process, which its "
                                           "pruning listens to; use orchestration=local")))
    if problems:
        raise ConfigProblems(problems)
    return tune


def searched_overrides(overrides: list[str]) -> list[str]:
    """The overrides that choose what the trials compute: all but those of `RUN_OPTIONS`."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return [override.input_line for override in parsed if _top_key(override.key_or_group) not in RUN_OPTIONS]


def _top_key(key: str) -> str:
    return re.split(r"[./]", key, maxsplit=1)[0]


def study_name(cfg: dict, overrides: list[str], tune: TuneConfig) -> str:
    """`tune.study`, else `<dataset id>-<hash of the searched overrides, the space and the metric>`."""
    if tune.study:
        return tune.study
    searched = {"overrides": searched_overrides(overrides), "space": cfg["tune"]["space"],
                "metric": tune.metric}
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', dataset_id(cfg))}-{fingerprint(searched)[:8]}"


def study_storage(cfg: dict, name: str) -> str:
    """The study's Optuna storage, `sqlite:///<paths.artifacts>/tune/<name>.db` (its folder created)."""
    folder = Path(cfg["paths"]["artifacts"]).resolve() / STUDIES_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / name}.db"


def hydra_value(value) -> str:
    """A sampled value as a Hydra override writes it: `null`, `true`, `0.01`, `[12,5,5]`, `gcn`, `'a b'`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", value) and value.lower() not in HYDRA_WORDS:
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _suggest(trial: optuna.Trial, name: str, distribution: FloatRange | IntRange | Choices):
    if isinstance(distribution, FloatRange):
        return trial.suggest_float(name, distribution.low, distribution.high, log=distribution.log)
    if isinstance(distribution, IntRange):
        return trial.suggest_int(name, distribution.low, distribution.high, log=distribution.log)
    return trial.suggest_categorical(name, list(distribution.choices))


def sample_overrides(trial: optuna.Trial, distributions: dict[str, Distribution], cfg: dict) -> list[str]:
    """The trial's values of the space as Hydra overrides, in the space's order.

    A per-layer list gets one entry per layer of the trial's `model.num_layers` (sampled, else `cfg`'s);
    a sampled depth sets `estimator.num_layers` too, which the config requires to be equal. Optuna names
    each value by its config path
    (`model.degrees.first` and `.others` for a per-layer list).
    """
    depth = distributions.get(DEPTH_PATH)
    layers = _suggest(trial, DEPTH_PATH, depth) if depth is not None else cfg["model"]["num_layers"]
    values = {}
    for path, distribution in distributions.items():
        if path == DEPTH_PATH:
            values[path] = values[FOLLOWS_DEPTH] = layers
        elif isinstance(distribution, PerLayer):
            first = _suggest(trial, f"{path}.first", distribution.first)
            others = _suggest(trial, f"{path}.others", distribution.others)
            values[path] = [first] + [others] * (layers - 1)
        else:
            values[path] = _suggest(trial, path, distribution)
    return [f"{path}={hydra_value(value)}" for path, value in values.items()]


def epoch_value(row: dict, metric: str | None) -> float | None:
    """The epoch's validation metric in a train history row: `metric`, else the row's val_<metric> (the
    one train selects by); None on a row without it."""
    if metric is None:
        metric = next((key for key in row if key.startswith("val_") and key != "val_loss"), None)
    value = row.get(metric) if metric else None
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def selection_metric(cfg: dict, tune: TuneConfig) -> str:
    """The metric a study optimises: `tune.metric`, else `val_<the dataset's metric>`, which the train stage
    selects its best epoch by. The dataset's metric comes from its cached preprocess result if there is
    one, else from loading it (what the run's checks do anyway)."""
    if tune.metric is not None:
        return tune.metric
    from sgt_core.object_store import open_store
    from sgt_core.pipeline import stage_keys

    store, key = open_store(cfg["paths"]["artifacts"]), stage_keys(cfg)["preprocess"]
    if store.is_complete("preprocess", key):
        return f"val_{store.metrics('preprocess', key)['metric']}"
    from sgt_core.data import load_dataset
    from sgt_core.tasks import default_metric

    graph = load_dataset(cfg["dataset"], seed=cfg["seed"])
    task = getattr(graph, "task", None) or "node_classification"
    outputs = graph.num_classes if task.endswith("classification") else graph.num_tasks
    return f"val_{getattr(graph, 'metric', None) or default_metric(task, outputs)}"


def minimised(metric: str) -> bool:
    """Whether a smaller value of `metric` (a `val_<name>` history column) is better: errors and losses."""
    return metric.endswith(("_mae", "_loss"))


def pruning_listener(trial: optuna.Trial, metric: str | None, minimise: bool = False) -> Listener:
    """An epoch listener reporting the trial's best validation metric so far to Optuna, which is what its
    objective will be (train keeps its best epoch); raises `optuna.TrialPruned` when the pruner says so."""
    best = math.inf if minimise else -math.inf

    def report(epoch: int, row: dict) -> None:
        nonlocal best
        value = epoch_value(row, metric)
        if value is None:
            return
        best = min(best, value) if minimise else max(best, value)
        trial.report(best, epoch)
        if trial.should_prune():
            raise optuna.TrialPruned(f"trial {trial.number} pruned at epoch {epoch} (best so far {best:.4f})")

    return report


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    """The study's best complete trial, or None before any completed."""
    try:
        return study.best_trial
    except ValueError:  # Optuna's answer while no trial is complete
        return None


def fail_stale_trials(study: optuna.Study) -> list[int]:
    """Marks FAIL the RUNNING trials whose process is gone (killed mid-trial); returns their numbers.

    A trial's process is recorded in its user attributes as it starts; one without them died before it
    got that far. A trial of another machine's process is left alone: whether it runs cannot be told.
    """
    host, stale = socket.gethostname(), []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner_host, pid = trial.user_attrs.get("host"), trial.user_attrs.get("pid")
        if owner_host not in (None, host):
            continue
        if pid is not None and pid != os.getpid() and process_exists(int(pid)):
            continue
        study.tell(trial.number, state=TrialState.FAIL)
        stale.append(trial.number)
    if stale:
        log.warning("study %s: marked FAIL the trials left running by a process that ended: %s",
                    study.study_name, ", ".join(map(str, stale)))
    return stale


def trials_figure(trials: list[FrozenTrial], metric: str, title: str) -> Figure:
    """Each trial's objective against its number: complete trials, pruned ones at their best value when
    stopped, and the best so far (the Figure API, never pyplot, as in flows/plots.py)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.0), dpi=100, layout="constrained")
    ax = figure.subplots()
    complete = [(trial.number, trial.value) for trial in trials if trial.state == TrialState.COMPLETE]
    pruned = [(trial.number, trial.intermediate_values[max(trial.intermediate_values)]) for trial in trials
              if trial.state == TrialState.PRUNED and trial.intermediate_values]
    if complete:
        numbers, values = zip(*complete)
        ax.scatter(numbers, values, label="complete", zorder=3)
        running = [max(values[: index + 1]) for index in range(len(values))]
        ax.step([*numbers, trials[-1].number], [*running, running[-1]], where="post", color="tab:green",
                label="best so far")
    if pruned:
        ax.scatter(*zip(*pruned), marker="x", color="tab:red", label="pruned (best when stopped)", zorder=3)
    failed = sum(trial.state == TrialState.FAIL for trial in trials)
    ax.set(xlabel="trial", ylabel=metric,
           title=f"{title}: {len(complete)} complete, {len(pruned)} pruned, {failed} failed")
    if complete or pruned:
        ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return figure


def preset_document(overrides: list[str]) -> dict:
    """A `# @package _global_` preset's content that composes like `overrides` (but `RUN_OPTIONS`'):
    `+experiment=X` includes X, a group choice overrides it, values go where their keys say."""
    includes, choices, values = [], [], {}
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if _top_key(key) in RUN_OPTIONS:
            continue
        if override.is_delete() or override.is_sweep_override() or override.package is not None:
            raise ConfigError(f"tune.preset: cannot write the override {override.input_line} into a preset")
        value = override.value()
        if key == "experiment":
            includes.append(value)  # another preset of the same folder, merged before this one's values
        elif "." not in key and (config_dir() / key).is_dir():
            choices.append({f"override /{key}": value})  # Hydra wants overrides after the includes
        else:
            *parents, name = key.split(".")
            group = values
            for parent in parents:
                if not isinstance(group.get(parent), dict):
                    group[parent] = {}
                group = group[parent]
            group[name] = value
    return {"defaults": [*includes, *choices, "_self_"], **values}


def write_preset(name: str, overwrite: bool, overrides: list[str], expected: dict, header: str) -> Path:
    """conf/experiment/<name>.yaml composing to `expected`'s stage sections, written atomically.

    The file is composed under its temporary name before it takes its own: a preset that would not
    reproduce the best trial (an override a preset cannot hold) is never left behind.
    """
    path = config_dir() / "experiment" / f"{name}.yaml"
    if path.exists() and not overwrite:
        raise ConfigError(f"tune.preset: {path} exists; choose another name or set "
                          "tune.overwrite_preset=true")
    document = preset_document(overrides)
    defaults = yaml.safe_dump({"defaults": document.pop("defaults")}, sort_keys=False)  # one entry per line
    text = header + defaults + yaml.safe_dump(document, sort_keys=False, default_flow_style=None)
    with atomic_path(path) as partial:
        partial.write_text(text)
        try:
            composed = compose_config([f"+experiment={partial.stem}"])
        except ConfigError as error:
            raise ConfigError(f"tune.preset: the preset written from {' '.join(overrides)} does not compose: "
                              f"{error}") from None
        differing = [section for section in STAGE_SECTIONS if composed[section] != expected[section]]
        if differing:
            raise ConfigError(f"tune.preset: the preset written from {' '.join(overrides)} does not reproduce "
                              f"the best trial's {', '.join(differing)}")
    return path


@dataclass
class Tuning:
    """One `sgt tune` over a study: its trials as pipeline runs under the tuning run, and their records."""

    study: optuna.Study
    tune: TuneConfig
    base: list[str]  # the command's overrides
    cfg: dict  # their composed configuration
    tracker: Tracker
    run_id: str  # the tuning run's
    storage: str  # the study's Optuna storage URL
    metric: str  # what the study optimises (`selection_metric`), minimised if an error (`minimised`)
    recorded_best: int | None = None  # the trial whose best_config.yaml the tuning run holds

    def run(self) -> None:
        """Runs trials until the study has `tune.trials` finished (complete or pruned) ones."""
        invalid_in_a_row = 0
        while (done := len(self.study.get_trials(deepcopy=False, states=FINISHED))) < self.tune.trials:
            trial = self.study.ask()
            trial.set_user_attr("host", socket.gethostname())
            trial.set_user_attr("pid", os.getpid())
            log.info("study %s: trial %d (%d of %d finished)", self.study.study_name, trial.number, done,
                     self.tune.trials)
            try:
                state = self.run_trial(trial)
            except BaseException as error:
                with contextlib.suppress(Exception):  # nothing here may hide the error that ended the trial
                    trial.set_user_attr("error", f"{type(error).__name__}: {error}")
                    self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
                raise
            invalid_in_a_row = invalid_in_a_row + 1 if state == TrialState.FAIL else 0
            self.record()
            if invalid_in_a_row >= MAX_INVALID_IN_A_ROW:
                raise ConfigError(f"tune.space: {invalid_in_a_row} trials in a row had an invalid "
                                  f"configuration, the last: {trial.user_attrs.get('error')}")

    def run_trial(self, trial: optuna.Trial) -> TrialState:
        """One trial as a pipeline run nested under the tuning run; tells the study how it ended."""
        sampled = sample_overrides(trial, self.tune.distributions, self.cfg)
        trial.set_user_attr("overrides", sampled)
        overrides = [*self.base, INLINE, *sampled]
        tags = {"sgt.study": self.study.study_name, "sgt.trial": str(trial.number),
                "sgt.trial_overrides": " ".join(sampled)}
        try:
            compose_config(overrides)  # an invalid combination fails here, before anything is recorded
            with listening(pruning_listener(trial, self.metric, minimised(self.metric))):
                result = sgt_pipeline(overrides, parent_run_id=self.run_id, tags=tags)
        except optuna.TrialPruned as pruned:
            log.info("study %s: %s", self.study.study_name, pruned)
            self._mark_trial_run(trial.number, "pruned", "KILLED")
            self.study.tell(trial, state=TrialState.PRUNED)
            return TrialState.PRUNED
        except ConfigError as error:  # the study goes on: another trial may draw a valid configuration
            log.warning("study %s: trial %d has an invalid configuration: %s", self.study.study_name,
                        trial.number, error)
            trial.set_user_attr("error", str(error))
            self._mark_trial_run(trial.number, "failed")
            self.study.tell(trial, state=TrialState.FAIL)
            return TrialState.FAIL
        metric = self.metric
        value = result["metrics"].get(metric)
        if metric == "val_loss" or not isinstance(value, (int, float)) or not math.isfinite(value):
            reported = ", ".join(name for name in result["metrics"] if name.startswith("val_"))
            raise ConfigError(f"tune.metric: the pipeline reported {metric}={value!r}, which cannot be "
                              f"tuned; set tune.metric to one of {reported}")
        trial.set_user_attr("metric", metric)
        trial.set_user_attr(RUN_ID_ATTR, result["run_id"])
        self.tracker.set_tags(result["run_id"], {"sgt.trial_state": "complete"})
        self.study.tell(trial, value)
        best = best_trial(self.study)
        log.info("study %s: trial %d: %s = %.4f; best %.4f (trial %d)", self.study.study_name, trial.number,
                 metric, value, best.value, best.number)
        return TrialState.COMPLETE

    def _mark_trial_run(self, number: int, state: str, status: str | None = None) -> None:
        """Tags the trial's pipeline run (if it got one) `sgt.trial_state`; with `status`, ends it and its
        failed stage runs so: a pruned trial is stopped on purpose, not broken."""
        client, experiments = self.tracker.client, [self.tracker.experiment_id]
        query = f"tags.mlflow.parentRunId = '{self.run_id}' AND tags.`sgt.trial` = '{number}'"
        runs = client.search_runs(experiments, query, max_results=1)
        if not runs:
            return
        run_id = runs[0].info.run_id
        self.tracker.set_tags(run_id, {"sgt.trial_state": state})
        if status is not None:
            client.set_terminated(run_id, status)
            query = f"tags.mlflow.parentRunId = '{run_id}' AND attributes.status = 'FAILED'"
            for stage in client.search_runs(experiments, query):
                client.set_terminated(stage.info.run_id, status)

    def record(self) -> None:
        """The tuning run's metrics, best configuration and plot as the study stands: after every trial,
        so that a kill keeps them."""
        trials = self.study.get_trials(deepcopy=False)
        last, best = trials[-1], best_trial(self.study)
        now = int(datetime.now().timestamp() * 1000)
        metrics = [Metric("trial_value", last.value, now, last.number)] if last.value is not None else []
        if best is not None:
            metrics.append(Metric("best_value", best.value, now, last.number))
        if metrics:
            self.tracker.client.log_batch(self.run_id, metrics=metrics)
        metric = (best.user_attrs.get("metric") if best else None) or self.tune.metric or "validation metric"
        figure = trials_figure(trials, metric, self.study.study_name)
        self.tracker.log_figures(self.run_id, {"trials": figure})
        if best is not None and best.number != self.recorded_best:  # best_config.yaml changes with the best
            self.recorded_best = best.number
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "best_config.yaml"
                path.write_text(yaml.safe_dump(self.best_config(best), sort_keys=False))
                self.tracker.log_artifact(self.run_id, path)

    def best_config(self, best: FrozenTrial) -> dict:
        """What `best_config.yaml` holds: the best trial, its overrides and the configuration they compose."""
        cfg = compose_config([*self.base, INLINE, *best.user_attrs["overrides"]])
        return {"study": self.study.study_name, "metric": best.user_attrs.get("metric"), "value": best.value,
                "trial": best.number, "overrides": best.user_attrs["overrides"],
                "base_overrides": self.base, "mlflow_run_id": best.user_attrs.get(RUN_ID_ATTR),
                "config": {section: value for section, value in cfg.items() if section != "tune"}}

    def summary(self, preset: Path | None) -> dict:
        trials = self.study.get_trials(deepcopy=False)
        best = best_trial(self.study)
        return {
            "study": self.study.study_name,
            "storage": self.storage,
            "run_id": self.run_id,
            "tracking_uri": self.tracker.client.tracking_uri,
            "trials": [{"number": trial.number, "state": trial.state.name.lower(), "value": _trial_value(trial),
                        "overrides": trial.user_attrs.get("overrides", []),
                        "error": trial.user_attrs.get("error")} for trial in trials],
            "best": None if best is None else {"number": best.number, "value": best.value,
                                               "metric": best.user_attrs.get("metric"),
                                               "overrides": best.user_attrs["overrides"]},
            "preset": None if preset is None else str(preset),
        }


def _trial_value(trial: FrozenTrial) -> float | None:
    """A complete trial's value, a pruned one's best reported value, else None."""
    if trial.state == TrialState.PRUNED and trial.intermediate_values:
        return trial.intermediate_values[max(trial.intermediate_values)]
    return trial.value


def open_tuning_run(tracker: Tracker, study: optuna.Study, tune: TuneConfig, base: list[str],
                    storage: str) -> str:
    """The study's MLflow tuning run: the one it recorded, reopened (RUNNING, owned by this process), else
    a new one whose id the study keeps."""
    client, name = tracker.client, study.study_name
    tags = {"sgt.stage": TUNING_STAGE, "sgt.study": name, "sgt.storage": storage,
            "sgt.base_overrides": " ".join(base), "sgt.prefect_flow_run_id": runtime.flow_run.id or "",
            **owner_tags()}
    run_id = study.user_attrs.get(RUN_ID_ATTR)
    if run_id:
        try:
            run = client.get_run(run_id)
        except MlflowException:  # another MLflow store than the study's first
            run = None
        ours = run is not None and run.info.experiment_id == tracker.experiment_id
        if ours and run.info.lifecycle_stage == "active":  # not deleted
            # The Tracker created just before closed it if its process died (KILLED): it runs again now.
            client.update_run(run_id, status="RUNNING")
            tracker.set_tags(run_id, tags)
            log.info("study %s: resumed, MLflow tuning run %s", name, run_id)
            return run_id
    run_id = client.create_run(tracker.experiment_id, run_name=f"tune-{name}", tags=tags).info.run_id
    # What a resumed study may change (how many trials, the preset) is left out: params cannot change.
    searched = {key: value for key, value in tune.as_dict().items()
                if key not in ("trials", "preset", "overwrite_preset")}
    tracker.log_params(run_id, flatten({"tune": searched}))
    study.set_user_attr(RUN_ID_ATTR, run_id)
    return run_id


@flow(name="sgt-tune", persist_result=False)
def sgt_tune(overrides: list[str] | None = None) -> dict:
    """An Optuna study over `tune.space` on top of `overrides`, each trial a `sgt_pipeline` subflow.

    Runs trials until the study has `tune.trials` complete or pruned ones, then writes `tune.preset`.
    Returns the study's name and storage, the tuning run, every trial, the best and the preset's path.

    Optuna is used directly rather than through Hydra's Optuna sweeper: the CLI composes its configurations
    with Hydra's compose API (sgt_core/config/compose.py), not `@hydra.main`, which the sweeper needs; and a
    trial here is a whole pipeline run that reports its epochs to Optuna's pruner and is recorded in MLflow.

    What is stored where:
      - the study: Optuna's sqlite storage `<paths.artifacts>/tune/<study>.db`, so that the same command
        resumes it after a kill; trials a dead process left RUNNING are marked FAIL and run again;
      - MLflow: one tuning run (`sgt.stage=tuning`) in the pipeline runs' experiment, whose id the study
        keeps (a resumed study reopens it), with the metrics `trial_value` and `best_value` (step = trial
        number) and the artifacts `best_config.yaml` and `plots/trials.png`, rewritten after every trial;
        under it each trial's pipeline run, tagged `sgt.study`, `sgt.trial`, `sgt.trial_overrides` and
        `sgt.trial_state` (complete, pruned: ended KILLED, or failed);
      - `tune.preset=NAME`: the best configuration as conf/experiment/NAME.yaml, checked to compose back to
        the best trial's stages.
    """
    base = list(overrides or [])
    cfg = compose_config(base)
    tune = check_tuning(cfg)
    name = study_name(cfg, base, tune)
    storage = study_storage(cfg, name)
    claim_flow_run()
    tracker = Tracker(cfg)
    crash_flow_runs_of_dead_processes(tracker.closed_runs)  # a killed `sgt tune`'s flow and trial's subflow
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # each trial is logged here, as it ends
    metric = selection_metric(cfg, tune)
    study = optuna.create_study(
        storage=storage, study_name=name, load_if_exists=True,
        direction="minimize" if minimised(metric) else "maximize",
        pruner=optuna.pruners.MedianPruner(n_startup_trials=tune.pruner.startup_trials,
                                           n_warmup_steps=tune.pruner.warmup_epochs),
    )
    # Seeded past the trials the study has: a resumed study's sampler, seeded as the first, would draw
    # the first trials' values again (its startup trials are random draws from that seed).
    study.sampler = optuna.samplers.TPESampler(seed=tune.sampler_seed + len(study.trials))
    fail_stale_trials(study)
    run_id = open_tuning_run(tracker, study, tune, base, storage)
    tuning = Tuning(study, tune, base, cfg, tracker, run_id, storage, metric)
    preset = None
    try:
        tuning.run()
        best = best_trial(study)
        if tune.preset and best is None:
            log.warning("study %s: no trial completed, so no preset %s written", name, tune.preset)
        elif tune.preset:
            header = (f"# @package _global_\n# Written by `sgt tune` on {datetime.now():%Y-%m-%d %H:%M}: the "
                      f"best trial of study {name},\n# trial {best.number} ({best.user_attrs.get('metric')} = "
                      f"{best.value:.4f}, MLflow tuning run {run_id}).\n"
                      f"#   sgt run +experiment={tune.preset}\n")
            expected = compose_config([*base, INLINE, *best.user_attrs["overrides"]])
            preset = write_preset(tune.preset, tune.overwrite_preset, [*base, *best.user_attrs["overrides"]],
                                  expected, header)
            tracker.set_tags(run_id, {"sgt.preset": str(preset)})
    except BaseException as error:
        tracker.fail(run_id, killed=is_interrupt(error))
        raise
    tracker.end(run_id)
    return tuning.summary(preset)
