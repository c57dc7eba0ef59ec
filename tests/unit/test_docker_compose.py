"""Static checks of the local stack: docker-compose.yaml, docker/Dockerfile, docker/.env.example.

Docker is not needed (nor run): the compose file is parsed with ``yaml.safe_load`` (which
resolves the ``x-`` anchors and ``<<`` merges the same way Compose does) and every ``${VAR}``
is resolved as on a fresh checkout: the compose default, else the ``.env.example`` value.
Only ``test_docker_compose_config_is_valid`` runs ``docker compose config -q``, when a Compose
v2 client is installed (it validates without an engine); it is skipped otherwise.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yaml"
ENV_EXAMPLE = ROOT / "docker" / ".env.example"
PROJECT_DOCKERFILE = ROOT / "docker" / "Dockerfile"

AIRFLOW_COMMANDS = {
    "airflow-apiserver": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
}
AIRFLOW_SERVICES = ("airflow-init", *AIRFLOW_COMMANDS)
SPARK_WORKERS = ("spark-worker-1", "spark-worker-2")
EXPECTED_SERVICES = {
    *AIRFLOW_SERVICES,
    "postgres",
    "spark-master",
    *SPARK_WORKERS,
    "minio",
    "minio-init",
    "demo-api",
}
# Names the DAGs read: they must reach every Airflow process (tasks run in the scheduler).
REQUIRED_AIRFLOW_ENV = (
    "AIRFLOW_CONN_SPARK_ENRICH",
    "AIRFLOW_CONN_ENRICHMENT_API",
    "AIRFLOW_VAR_ENRICHMENT_SNAPSHOT_ROOT",
    "AIRFLOW_VAR_ENRICHMENT_DATA_ROOT",
)
S3_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL")
DATA_VOLUME = "enrichment-data"
DATA_MOUNT = "/opt/enrichment/data"
VALID_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}

# `$$` is a literal `$`; `${NAME[op]...}` or `$NAME` interpolate.
_INTERPOLATION = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[^}]*)\}|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)
_BRACED = re.compile(
    r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:-|-|:\?|\?|:\+|\+)(?P<arg>.*))?$"
)


# --------------------------------------------------------------------------------------------
# Loading and resolving
# --------------------------------------------------------------------------------------------


@functools.cache
def compose() -> dict[str, Any]:
    with COMPOSE_FILE.open() as f:
        data = yaml.safe_load(f)
    assert isinstance(data, dict) and isinstance(data.get("services"), dict), (
        f"{COMPOSE_FILE.name}: no top-level 'services' mapping"
    )
    return data


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


@functools.cache
def env_example() -> dict[str, str]:
    values: dict[str, str] = {}
    for lineno, raw in enumerate(ENV_EXAMPLE.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name.strip()), (
            f"{ENV_EXAMPLE.name}:{lineno}: not a NAME=value line: {raw!r}"
        )
        values[name.strip()] = value.strip()
    return values


def walk_strings(node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every string (mapping keys included) in a parsed YAML tree, with its path."""
    if isinstance(node, str):
        yield where, node
    elif isinstance(node, dict):
        for key, value in node.items():
            path = f"{where}.{key}" if where else str(key)
            if isinstance(key, str):
                yield f"{path} (key)", key
            yield from walk_strings(value, path)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk_strings(value, f"{where}[{i}]")


def interpolations(text: str) -> Iterator[tuple[str, str | None, str | None]]:
    """(name, operator, argument) of each interpolation in ``text``; ``$$`` is skipped."""
    for m in _INTERPOLATION.finditer(text):
        if m["escaped"]:
            continue
        if m["named"]:
            yield m["named"], None, None
            continue
        braced = _BRACED.match(m["braced"])
        assert braced, f"unparseable interpolation ${{{m['braced']}}} in {text!r}"
        yield braced["name"], braced["op"], braced["arg"]


def resolve(value: Any) -> Any:
    """Interpolate as Compose would with nothing set but the defaults and .env.example."""
    if not isinstance(value, str):
        return value

    def substitute(m: re.Match[str]) -> str:
        if m["escaped"]:
            return "$"
        if m["named"]:
            return env_example().get(m["named"], "")
        braced = _BRACED.match(m["braced"])
        assert braced, f"unparseable interpolation ${{{m['braced']}}} in {value!r}"
        name, op, arg = braced["name"], braced["op"], braced["arg"]
        if op in (":-", "-"):
            # The default applies on a fresh checkout; .env.example documents the same value.
            return arg
        if name in env_example():
            current = env_example()[name]
            if op in (":+", "+"):
                return arg if (current or op == "+") else ""
            return current
        if op in (":?", "?"):
            raise AssertionError(f"${{{name}}} is required but set nowhere ({value!r})")
        return ""

    return _INTERPOLATION.sub(substitute, value)


def environment(service: str) -> dict[str, str | None]:
    env = services()[service].get("environment") or {}
    if isinstance(env, list):
        pairs = (item.partition("=") for item in env)
        env = {name: (value if sep else None) for name, sep, value in pairs}
    return {name: resolve(value) if value is not None else None for name, value in env.items()}


def command(service: str) -> list[str]:
    cmd = services()[service].get("command") or []
    return shlex.split(cmd) if isinstance(cmd, str) else [str(part) for part in cmd]


def option(service: str, flag: str) -> str | None:
    """Value of ``flag`` (``--flag value`` or ``--flag=value``) in the service's command."""
    args = command(service)
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def depends_on(service: str) -> dict[str, dict[str, Any]]:
    deps = services()[service].get("depends_on") or {}
    if isinstance(deps, list):
        return {name: {"condition": "service_started"} for name in deps}
    return {name: (spec or {"condition": "service_started"}) for name, spec in deps.items()}


def is_one_shot(service: str) -> bool:
    return str(services()[service].get("restart", "no")) == "no"


def has_healthcheck(service: str) -> bool:
    check = services()[service].get("healthcheck")
    if not check or check.get("disable"):
        return False
    test = check.get("test")
    if isinstance(test, str):
        return bool(test.strip())
    return bool(test) and test[0] != "NONE" and len(test) > 1


def volume_mounts(service: str) -> list[tuple[str, str | None, str]]:
    """(type, source, target) for each entry of the service's ``volumes``."""
    mounts = []
    for entry in services()[service].get("volumes") or []:
        if isinstance(entry, dict):
            kind = entry.get("type", "volume")
            mounts.append((kind, resolve(entry.get("source")), resolve(entry["target"])))
            continue
        parts = resolve(entry).split(":")
        if len(parts) == 1:  # anonymous volume
            mounts.append(("volume", None, parts[0]))
            continue
        source, target = parts[0], parts[1]
        kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        mounts.append((kind, source, target))
    return mounts


def published_ports(service: str) -> list[tuple[int, str]]:
    """(host port, protocol) for each port the service publishes on the host."""
    published = []
    for entry in services()[service].get("ports") or []:
        if isinstance(entry, dict):
            if entry.get("published") in (None, ""):
                continue
            host, proto = str(resolve(entry["published"])), entry.get("protocol", "tcp")
        else:
            spec, _, proto = str(resolve(entry)).partition("/")
            parts = spec.split(":")
            if len(parts) == 1:  # container port only: Docker picks an ephemeral host port
                continue
            host, proto = parts[-2], proto or "tcp"
        if not host:
            continue
        first, _, last = host.partition("-")
        published += [(port, proto) for port in range(int(first), int(last or first) + 1)]
    return published


def image_tag(reference: str) -> str | None:
    """The tag of an image reference (None when untagged); digests count as pinned."""
    if "@sha256:" in reference:
        return "@digest"
    last = reference.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else None


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    logical, current = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        logical.append(current)
        current = ""
    if current:
        logical.append(current)
    result = []
    for instruction in logical:
        keyword, _, args = instruction.partition(" ")
        result.append((keyword.upper(), args.strip()))
    return result


def dockerfile_base_images(path: Path) -> list[str]:
    """Base image references of every FROM, ARG defaults substituted, stage names skipped."""
    args: dict[str, str] = {}
    stages: set[str] = set()
    bases = []
    for keyword, rest in dockerfile_instructions(path):
        if keyword == "ARG" and not bases:
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip().strip('"')
        elif keyword == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            image = re.sub(
                r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: args.get(m[1], ""), words[0]
            )
            if len(words) >= 3 and words[1].lower() == "as":
                stages.add(words[2])
            if image not in stages and image != "scratch":
                bases.append(image)
    return bases


def airflow_config_template() -> dict[str, Any] | None:
    spec = importlib.util.find_spec("airflow")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "config_templates" / "config.yml"
    return yaml.safe_load(path.read_text()) if path.exists() else None


def connection_endpoint(name: str, raw: str) -> tuple[str, str, int | None]:
    """(conn_type, host, port) of an AIRFLOW_CONN_* value, in URI or JSON form."""
    if raw.lstrip().startswith("{"):
        try:
            conn = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"{name}: not valid JSON ({exc}): {raw!r}") from exc
        host = str(conn.get("host") or "")
        port = conn.get("port")
        if "://" in host:  # e.g. {"conn_type": "spark", "host": "spark://spark-master"}
            host = urlsplit(host).hostname or ""
        return str(conn.get("conn_type") or ""), host, int(port) if port is not None else None
    parts = urlsplit(raw)
    try:
        port = parts.port
    except ValueError as exc:
        raise AssertionError(f"{name}: bad port in URI {raw!r}") from exc
    return parts.scheme, unquote(parts.hostname or ""), port


# --------------------------------------------------------------------------------------------
# Services
# --------------------------------------------------------------------------------------------


def test_expected_services_exist() -> None:
    missing = EXPECTED_SERVICES - set(services())
    assert not missing, f"{COMPOSE_FILE.name}: services missing: {sorted(missing)}"
    for name, cmd in AIRFLOW_COMMANDS.items():
        args = command(name)
        assert args[:1] == [cmd] or args[:2] == ["airflow", cmd], (
            f"service {name}: command should be `{cmd}` (Airflow image entrypoint), got {args}"
        )
    init = " ".join(command("airflow-init"))
    assert "airflow db migrate" in init, "service airflow-init: command lacks `airflow db migrate`"


def test_images_are_pinned() -> None:
    builds: dict[str, Any] = {}
    for name, svc in services().items():
        build = svc.get("build")
        image = resolve(svc.get("image"))
        if image:
            tag = image_tag(image)
            assert tag and tag != "latest", (
                f"service {name}: image {image!r} must carry an explicit, non-latest tag"
            )
        if build is None:
            assert image, f"service {name}: neither image nor build"
            continue
        build = {"context": build} if isinstance(build, str) else build
        context = ROOT / resolve(build.get("context", "."))
        dockerfile = context / resolve(build.get("dockerfile", "Dockerfile"))
        assert dockerfile.is_file(), f"service {name}: build.dockerfile {dockerfile} is missing"
        for base in dockerfile_base_images(dockerfile):
            tag = image_tag(base)
            assert tag and tag != "latest", (
                f"service {name}: {dockerfile.relative_to(ROOT)} FROM {base!r} is not pinned"
            )
        if image:
            previous = builds.setdefault(image, build)
            assert previous == build, (
                f"service {name}: image {image!r} is built with {build}, elsewhere {previous}"
            )


def test_dockerfiles_pin_their_base_images() -> None:
    dockerfiles = sorted((ROOT / "docker").glob("*Dockerfile"))
    assert PROJECT_DOCKERFILE in dockerfiles, f"{PROJECT_DOCKERFILE} is missing"
    for dockerfile in dockerfiles:
        bases = dockerfile_base_images(dockerfile)
        assert bases, f"{dockerfile.relative_to(ROOT)}: no FROM line"
        for base in bases:
            tag = image_tag(base)
            assert tag and tag != "latest", (
                f"{dockerfile.relative_to(ROOT)}: FROM {base!r} must be pinned to a tag"
            )


def test_depends_on_names_existing_services_with_valid_conditions() -> None:
    for name in services():
        for dep, spec in depends_on(name).items():
            assert dep in set(services()), f"service {name}: depends_on unknown service {dep!r}"
            condition = spec.get("condition", "service_started")
            assert condition in VALID_CONDITIONS, (
                f"service {name}: depends_on.{dep}.condition {condition!r} is not one of "
                f"{sorted(VALID_CONDITIONS)}"
            )
            if condition == "service_healthy":
                assert has_healthcheck(dep), (
                    f"service {name}: waits for {dep} to be healthy, but {dep} has no healthcheck"
                )
            if condition == "service_completed_successfully":
                assert is_one_shot(dep), (
                    f"service {name}: waits for {dep} to complete, but {dep} restarts "
                    f"(restart: {services()[dep].get('restart')!r}); one-shots need restart: 'no'"
                )


def test_depends_on_has_no_cycles() -> None:
    visiting: set[str] = set()
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in visiting, f"depends_on cycle: {' -> '.join((*path, name))}"
        if name in done:
            return
        visiting.add(name)
        for dep in depends_on(name):
            if dep in services():
                visit(dep, (*path, name))
        visiting.discard(name)
        done.add(name)

    for name in services():
        visit(name, ())


def test_long_running_services_have_healthchecks() -> None:
    for name in services():
        if not is_one_shot(name):
            assert has_healthcheck(name), f"service {name}: long-running but no healthcheck"


def test_one_shot_services_are_awaited_by_a_long_running_service() -> None:
    """`docker compose up --wait` only accepts an exited one-shot that someone depends on."""
    for name in services():
        if not is_one_shot(name):
            continue
        adopters = [
            other
            for other in services()
            if not is_one_shot(other)
            and depends_on(other).get(name, {}).get("condition") == "service_completed_successfully"
        ]
        assert adopters, (
            f"service {name}: one-shot (restart: 'no') but no long-running service depends on it "
            f"with condition service_completed_successfully"
        )


# --------------------------------------------------------------------------------------------
# Volumes, networks, ports, interpolation
# --------------------------------------------------------------------------------------------


def test_named_volumes_are_declared_and_used() -> None:
    declared = set(compose().get("volumes") or {})
    used = set()
    for name in services():
        for kind, source, target in volume_mounts(name):
            if kind == "volume" and source:
                used.add(source)
                assert source in declared, (
                    f"service {name}: volume {source!r} (on {target}) is not declared under "
                    f"top-level volumes"
                )
    unused = declared - used
    assert not unused, f"top-level volumes declared but not used by any service: {sorted(unused)}"


def test_networks_are_declared() -> None:
    declared = set(compose().get("networks") or {}) | {"default"}
    for name, svc in services().items():
        networks = svc.get("networks") or []
        for network in networks if isinstance(networks, list) else networks.keys():
            assert network in declared, f"service {name}: network {network!r} is not declared"


def test_interpolations_have_defaults_or_are_documented() -> None:
    documented = env_example()
    for where, text in walk_strings(compose()):
        for name, op, _ in interpolations(text):
            assert op in (":-", "-") or name in documented, (
                f"{where}: ${{{name}}} has no default (use ${{{name}:-value}}) and is not in "
                f"{ENV_EXAMPLE.relative_to(ROOT)}"
            )


def test_env_example_matches_the_compose_defaults() -> None:
    defaults: dict[str, set[str]] = {}
    referenced = set()
    for _, text in walk_strings(compose()):
        for name, op, arg in interpolations(text):
            referenced.add(name)
            if op in (":-", "-"):
                defaults.setdefault(name, set()).add(arg or "")
    for name, values in defaults.items():
        assert len(values) == 1, f"${{{name}}} has different defaults in places: {sorted(values)}"
        if name in env_example():
            assert env_example()[name] == next(iter(values)), (
                f"{ENV_EXAMPLE.relative_to(ROOT)}: {name}={env_example()[name]!r} differs from "
                f"the compose default {next(iter(values))!r}"
            )
    stale = set(env_example()) - referenced
    assert not stale, f"{ENV_EXAMPLE.relative_to(ROOT)}: variables no service uses: {sorted(stale)}"


def test_published_host_ports_do_not_clash() -> None:
    owners: dict[tuple[int, str], str] = {}
    for name in services():
        for port in published_ports(name):
            assert port not in owners, (
                f"service {name}: host port {port[0]}/{port[1]} is already published by "
                f"{owners[port]}"
            )
            owners[port] = name
    assert (8080, "tcp") in owners and owners[(8080, "tcp")] == "airflow-apiserver", (
        "airflow-apiserver: should publish host port 8080"
    )
    assert owners.get((8081, "tcp")) == "spark-master", "spark-master: UI on host port 8081"
    assert owners.get((8090, "tcp")) == "demo-api", "demo-api: should publish host port 8090"


# --------------------------------------------------------------------------------------------
# Airflow wiring
# --------------------------------------------------------------------------------------------


def test_airflow_services_share_the_postgres_metadata_db() -> None:
    conns = {
        name: environment(name).get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
        for name in AIRFLOW_SERVICES
    }
    for name, conn in conns.items():
        assert conn, f"service {name}: AIRFLOW__DATABASE__SQL_ALCHEMY_CONN is not set"
    assert len(set(conns.values())) == 1, f"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN differs: {conns}"
    url = urlsplit(next(iter(conns.values())))
    assert url.scheme.startswith("postgresql"), f"SQL_ALCHEMY_CONN is not Postgres: {url.geturl()}"
    assert url.hostname in set(services()), (
        f"SQL_ALCHEMY_CONN host {url.hostname!r} is not a service of {COMPOSE_FILE.name}"
    )
    db = environment(url.hostname)
    expected = (db.get("POSTGRES_USER"), db.get("POSTGRES_PASSWORD"), db.get("POSTGRES_DB"))
    actual = (url.username, url.password, url.path.lstrip("/"))
    assert actual == expected, (
        f"SQL_ALCHEMY_CONN user/password/db {actual} do not match service {url.hostname}'s "
        f"POSTGRES_USER/POSTGRES_PASSWORD/POSTGRES_DB {expected}"
    )
    for name in AIRFLOW_SERVICES:
        assert depends_on(name).get(url.hostname, {}).get("condition") == "service_healthy", (
            f"service {name}: should depend on {url.hostname} with condition service_healthy"
        )


def test_airflow_core_settings() -> None:
    for name in AIRFLOW_SERVICES:
        env = environment(name)
        assert env.get("AIRFLOW__CORE__EXECUTOR") == "LocalExecutor", (
            f"service {name}: AIRFLOW__CORE__EXECUTOR should be LocalExecutor"
        )
        assert str(env.get("AIRFLOW__CORE__LOAD_EXAMPLES")).lower() == "false", (
            f"service {name}: AIRFLOW__CORE__LOAD_EXAMPLES should be false"
        )
        assert (env.get("AIRFLOW__CORE__AUTH_MANAGER") or "").endswith("SimpleAuthManager"), (
            f"service {name}: AIRFLOW__CORE__AUTH_MANAGER should be the SimpleAuthManager"
        )
        fernet = env.get("AIRFLOW__CORE__FERNET_KEY") or ""
        try:
            from cryptography.fernet import Fernet

            Fernet(fernet.encode())
        except ImportError:
            pass
        except ValueError as exc:
            raise AssertionError(
                f"service {name}: AIRFLOW__CORE__FERNET_KEY invalid: {exc}"
            ) from exc
        for required in REQUIRED_AIRFLOW_ENV + S3_ENV:
            assert env.get(required), f"service {name}: {required} is not set"
    for name in AIRFLOW_COMMANDS:
        env = environment(name)
        jwt_secret = env.get("AIRFLOW__API_AUTH__JWT_SECRET") or ""
        assert len(jwt_secret) >= 64, (
            f"service {name}: AIRFLOW__API_AUTH__JWT_SECRET should be 64+ characters "
            f"(HS512); got {len(jwt_secret)}"
        )
        url = urlsplit(env.get("AIRFLOW__CORE__EXECUTION_API_SERVER_URL") or "")
        assert url.hostname in set(services()) and url.path.endswith("/execution/"), (
            f"service {name}: AIRFLOW__CORE__EXECUTION_API_SERVER_URL {url.geturl()!r} should be "
            f"http://<api-server service>:8080/execution/"
        )
    secrets = {
        name: environment(name).get("AIRFLOW__API_AUTH__JWT_SECRET") for name in AIRFLOW_COMMANDS
    }
    assert len(set(secrets.values())) == 1, f"AIRFLOW__API_AUTH__JWT_SECRET differs: {secrets}"


def test_airflow_config_options_exist_in_installed_airflow() -> None:
    template = airflow_config_template()
    if template is None:
        pytest.skip("apache-airflow is not installed: cannot check AIRFLOW__SECTION__KEY names")
    for name in services():
        for var in environment(name):
            match = re.fullmatch(r"AIRFLOW__([A-Z0-9_]+?)__([A-Z0-9_]+)", var)
            if not match:
                continue
            section, key = match[1].lower(), match[2].lower()
            assert key in (template.get(section) or {}).get("options", {}), (
                f"service {name}: {var} is not an option of the installed Airflow "
                f"([{section}] {key} missing from config.yml)"
            )


def test_airflow_connections_parse_and_name_services() -> None:
    for name in AIRFLOW_SERVICES:
        for var, raw in environment(name).items():
            if not var.startswith("AIRFLOW_CONN_") or raw is None:
                continue
            conn_type, host, port = connection_endpoint(var, raw)
            assert conn_type, f"service {name}: {var} has no connection type: {raw!r}"
            assert host in set(services()), (
                f"service {name}: {var} host {host!r} is not a service of {COMPOSE_FILE.name}"
            )
            served = option(host, "--port")
            if served is not None:
                assert port == int(served), (
                    f"service {name}: {var} port {port} but service {host} listens on {served}"
                )


def test_spark_connection_matches_the_master_the_workers_join() -> None:
    for name in AIRFLOW_SERVICES:
        raw = environment(name)["AIRFLOW_CONN_SPARK_ENRICH"] or ""
        conn_type, host, port = connection_endpoint("AIRFLOW_CONN_SPARK_ENRICH", raw)
        # SparkSubmitHook builds the master URL as f"{conn_type}://{host}:{port}".
        master_url = f"{conn_type}://{host}:{port}"
        assert master_url == "spark://spark-master:7077", (
            f"service {name}: AIRFLOW_CONN_SPARK_ENRICH gives master {master_url!r}"
        )
        advertised = (
            f"spark://{option('spark-master', '--host')}:{option('spark-master', '--port')}"
        )
        assert master_url == advertised, (
            f"service {name}: AIRFLOW_CONN_SPARK_ENRICH gives {master_url}, spark-master "
            f"advertises {advertised}"
        )
    for worker in SPARK_WORKERS:
        assert "spark://spark-master:7077" in command(worker), (
            f"service {worker}: command should join spark://spark-master:7077: {command(worker)}"
        )


def test_api_connection_carries_the_demo_api_token() -> None:
    token = environment("demo-api").get("ENRICHMENT_API_TOKEN")
    assert token, "service demo-api: ENRICHMENT_API_TOKEN is not set"
    assert option("demo-api", "--token-env") == "ENRICHMENT_API_TOKEN", (
        "service demo-api: command should pass --token-env ENRICHMENT_API_TOKEN"
    )
    for name in AIRFLOW_SERVICES:
        raw = environment(name)["AIRFLOW_CONN_ENRICHMENT_API"] or ""
        conn = json.loads(raw)
        assert conn.get("conn_type") == "http" and conn.get("host") == "demo-api", (
            f"service {name}: AIRFLOW_CONN_ENRICHMENT_API should be an http connection to demo-api"
        )
        assert conn.get("password") == token, (
            f"service {name}: AIRFLOW_CONN_ENRICHMENT_API password is not demo-api's "
            f"ENRICHMENT_API_TOKEN"
        )


def test_s3_settings_point_at_minio() -> None:
    minio = environment("minio")
    for name in (*AIRFLOW_SERVICES, *SPARK_WORKERS):
        env = environment(name)
        for var in S3_ENV:
            assert env.get(var), f"service {name}: {var} is not set"
        url = urlsplit(env["AWS_ENDPOINT_URL"] or "")
        assert url.hostname in set(services()), (
            f"service {name}: AWS_ENDPOINT_URL host {url.hostname!r} is not a service"
        )
        assert url.port == 9000, f"service {name}: AWS_ENDPOINT_URL should use MinIO's port 9000"
        creds = (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"])
        scoped = environment("minio-init")
        assert creds == (scoped["MINIO_ENRICHMENT_USER"], scoped["MINIO_ENRICHMENT_PASSWORD"]), (
            f"service {name}: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY are not the scoped user "
            f"minio-init creates (MINIO_ENRICHMENT_USER/MINIO_ENRICHMENT_PASSWORD)"
        )
    assert len(minio.get("MINIO_ROOT_PASSWORD") or "") >= 8, (
        "service minio: MINIO_ROOT_PASSWORD must be 8+ characters or MinIO refuses to start"
    )
    root = urlsplit(environment("airflow-scheduler")["AIRFLOW_VAR_ENRICHMENT_SNAPSHOT_ROOT"] or "")
    assert root.scheme == "s3", "AIRFLOW_VAR_ENRICHMENT_SNAPSHOT_ROOT should be an s3:// URL"
    assert f"local/{root.hostname}" in " ".join(command("minio-init")), (
        f"service minio-init: does not create bucket {root.hostname!r} of "
        f"AIRFLOW_VAR_ENRICHMENT_SNAPSHOT_ROOT"
    )


def test_spark_applications_get_scoped_minio_credentials_never_the_root_ones() -> None:
    """The driver (Airflow's scheduler) and the executors (Spark workers) hold a MinIO user
    allowed the snapshot bucket only; the root credentials stay with MinIO and minio-init."""
    minio = environment("minio")
    root = {minio["MINIO_ROOT_USER"], minio["MINIO_ROOT_PASSWORD"]}
    for name in services():
        if name in ("minio", "minio-init"):
            continue
        values = set(environment(name).values())
        assert not root & values, f"service {name}: holds MinIO's root credentials"
    for name in (*AIRFLOW_SERVICES, *SPARK_WORKERS):
        env = environment(name)
        assert env["AWS_ACCESS_KEY_ID"] != minio["MINIO_ROOT_USER"], name
        assert env["AWS_SECRET_ACCESS_KEY"] != minio["MINIO_ROOT_PASSWORD"], name
    script = resolve("\n".join(command("minio-init")))
    assert 'mc admin user add local "$MINIO_ENRICHMENT_USER" "$MINIO_ENRICHMENT_PASSWORD"' in (
        script
    )
    attached = re.search(r"mc admin policy attach local (\S+) --user \"\$MINIO_ENRICH", script)
    assert attached, "service minio-init: attaches no policy to the scoped user"
    assert f"mc admin policy create local {attached[1]} /tmp/" in script
    policy = json.loads(script.split("<<'JSON'\n", 1)[1].split("\nJSON\n", 1)[0])
    bucket = urlsplit(
        environment("airflow-scheduler")["AIRFLOW_VAR_ENRICHMENT_SNAPSHOT_ROOT"] or ""
    )
    resources = {r for statement in policy["Statement"] for r in statement["Resource"]}
    assert resources == {f"arn:aws:s3:::{bucket.hostname}", f"arn:aws:s3:::{bucket.hostname}/*"}
    actions = {a for statement in policy["Statement"] for a in statement["Action"]}
    assert all(a.startswith("s3:") and "*" not in a for a in actions), actions
    assert not any(a.startswith(("s3:PutBucket", "s3:DeleteBucket")) for a in actions)


def test_the_standalone_spark_cluster_requires_its_authentication_secret() -> None:
    """Master and workers run with spark.authenticate and one shared secret, read from the
    environment; the driver (Airflow's spark-submit) gets both from a spark-defaults.conf
    that airflow-init writes; the secret is on no command line."""
    secret = environment("spark-master")["_SPARK_AUTH_SECRET"]
    assert secret and len(secret) >= 16
    assert "-Dspark.authenticate=true" in (environment("spark-master")["SPARK_MASTER_OPTS"] or "")
    for name in SPARK_WORKERS:
        env = environment(name)
        assert "-Dspark.authenticate=true" in (env["SPARK_WORKER_OPTS"] or ""), name
        assert env["_SPARK_AUTH_SECRET"] == secret, f"service {name}: another Spark secret"
    conf_dir = {environment(name).get("SPARK_CONF_DIR") for name in AIRFLOW_SERVICES}
    assert len(conf_dir) == 1 and None not in conf_dir, conf_dir
    [path] = conf_dir
    assert path and path.startswith("/opt/airflow/config/")  # the shared airflow-config volume
    init = resolve(" ".join(command("airflow-init")))
    assert "umask 077" in init and "spark.authenticate true" in init
    assert 'spark.authenticate.secret %s\\n\' "$SPARK_AUTH_SECRET"' in init
    assert '"$SPARK_CONF_DIR/spark-defaults.conf"' in init
    assert environment("airflow-init")["SPARK_AUTH_SECRET"] == secret
    for name in services():
        where = resolve(" ".join(command(name)))
        assert secret not in where, f"service {name}: the secret on a command line"


def test_the_scheduler_serves_no_logs_the_api_server_reads_from_the_shared_volume() -> None:
    assert "--skip-serve-logs" in command("airflow-scheduler")
    for name in ("airflow-scheduler", "airflow-apiserver"):
        assert ("volume", "airflow-logs", "/opt/airflow/logs") in volume_mounts(name), name


def test_data_volume_is_shared_by_airflow_and_spark_workers() -> None:
    for name in (*AIRFLOW_SERVICES, *SPARK_WORKERS):
        mounts = volume_mounts(name)
        assert ("volume", DATA_VOLUME, DATA_MOUNT) in mounts, (
            f"service {name}: volume {DATA_VOLUME} should be mounted at {DATA_MOUNT}"
        )
    for name in AIRFLOW_SERVICES:
        assert environment(name)["AIRFLOW_VAR_ENRICHMENT_DATA_ROOT"] == DATA_MOUNT, (
            f"service {name}: AIRFLOW_VAR_ENRICHMENT_DATA_ROOT should be {DATA_MOUNT}"
        )
        assert ("bind", "./dags", "/opt/airflow/dags") in volume_mounts(name), (
            f"service {name}: ./dags should be bind-mounted on /opt/airflow/dags"
        )


# --------------------------------------------------------------------------------------------
# Dockerfile
# --------------------------------------------------------------------------------------------


def test_dockerfile_installs_java_17_and_pinned_requirements() -> None:
    instructions = dockerfile_instructions(PROJECT_DOCKERFILE)
    runs = [args for keyword, args in instructions if keyword == "RUN"]
    assert any(
        re.search(r"apt-get install\b.*\bopenjdk-17-(jre|jdk)(-headless)?\b", run) for run in runs
    ), "docker/Dockerfile: no RUN apt-get install of openjdk-17-jre(-headless)"
    pip_runs = [run for run in runs if re.search(r"\bpip install\b", run)]
    assert any(
        re.search(r"wheel\}\[airflow,s3,spark\]", run)
        and re.search(r"(-c|--constraint)[\s=]+\S*constraints\.txt\b", run)
        for run in pip_runs
    ), "docker/Dockerfile: the project's wheel must be installed with -c constraints.txt"
    assert any("--output-file dist/enrich_env.pex" in run for run in runs), (
        "docker/Dockerfile: the packed executor runtime must be built as `make dist` does"
    )
    envs = " ".join(args for keyword, args in instructions if keyword == "ENV")
    assert re.search(r"\bPYSPARK_PYTHON=\S+python", envs), (
        "docker/Dockerfile: ENV PYSPARK_PYTHON should name the image's python"
    )
    assert re.search(r"\bJAVA_HOME=\S+", envs), "docker/Dockerfile: ENV JAVA_HOME is not set"


def test_dockerfile_copies_only_what_the_context_sends() -> None:
    ignore_file = PROJECT_DOCKERFILE.with_name(PROJECT_DOCKERFILE.name + ".dockerignore")
    ignore_lines = [
        line.strip()
        for line in (ignore_file.read_text().splitlines() if ignore_file.exists() else [])
        if line.strip() and not line.lstrip().startswith("#")
    ]
    allowlist = bool(ignore_lines) and ignore_lines[0] == "*"
    allowed = {line[1:].rstrip("/") for line in ignore_lines if line.startswith("!")}
    for keyword, args in dockerfile_instructions(PROJECT_DOCKERFILE):
        if keyword not in ("COPY", "ADD"):
            continue
        words = [w for w in args.split() if not w.startswith("--")]
        if any(w.startswith("--from") for w in args.split()):
            continue
        for source in words[:-1]:
            assert (ROOT / source).exists(), (
                f"docker/Dockerfile: {keyword} source {source!r} is not in the build context"
            )
            if allowlist:
                assert source.rstrip("/") in allowed, (
                    f"docker/Dockerfile: {keyword} source {source!r} is excluded by "
                    f"{ignore_file.relative_to(ROOT)} (add !{source})"
                )


# --------------------------------------------------------------------------------------------
# The real Compose parser, when there is one
# --------------------------------------------------------------------------------------------


def compose_v2_command() -> tuple[list[str] | None, str]:
    """The argv prefix of a Compose v2 client, or None and why there is none."""
    reasons = []
    candidates = []
    if shutil.which("docker"):
        candidates.append(["docker", "compose"])
    else:
        reasons.append("no `docker` binary")
    if shutil.which("docker-compose"):
        candidates.append(["docker-compose"])
    for argv in candidates:
        try:
            out = subprocess.run(
                [*argv, "version", "--short"], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            reasons.append(f"`{' '.join(argv)} version` failed: {exc}")
            continue
        version = out.stdout.strip().lstrip("v")
        if out.returncode != 0 or not version:
            reasons.append(f"`{' '.join(argv)}` is not available (compose plugin missing)")
        elif not version.split(".")[0].isdigit() or int(version.split(".")[0]) < 2:
            reasons.append(f"`{' '.join(argv)}` is Compose {version}, not v2+")
        else:
            return argv, ""
    return None, "; ".join(reasons)


def test_docker_compose_config_is_valid() -> None:
    argv, why = compose_v2_command()
    if argv is None:
        pytest.skip(f"Docker Compose v2 client not available ({why})")
    result = subprocess.run(
        [*argv, "-f", str(COMPOSE_FILE), "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, (
        f"`{' '.join(argv)} config -q` rejected {COMPOSE_FILE.name}:\n{result.stderr}"
    )


# --------------------------------------------------------------------------------------------
# Secrets
# --------------------------------------------------------------------------------------------

SECRET_NAMES = (
    "AIRFLOW_ADMIN_PASSWORD",
    "AIRFLOW_FERNET_KEY",
    "AIRFLOW_JWT_SECRET",
    "ENRICHMENT_API_TOKEN",
    "MINIO_ROOT_PASSWORD",
    "MINIO_ENRICHMENT_PASSWORD",
    "SPARK_AUTH_SECRET",
    "POSTGRES_PASSWORD",
)


def test_secrets_have_no_published_default() -> None:
    """Without a .env the stack refuses to start instead of using the example's values."""
    for where, text in walk_strings(compose()):
        for name, op, _ in interpolations(text):
            if name in SECRET_NAMES:
                assert op == ":?", f"{where}: ${{{name}}} must be required (${{{name}:?...}})"
    used = {name for _, text in walk_strings(compose()) for name, _, _ in interpolations(text)}
    assert set(SECRET_NAMES) <= used, f"secrets not used: {set(SECRET_NAMES) - used}"
    assert "airflow:airflow@" not in COMPOSE_FILE.read_text(), "Postgres password is fixed"


def test_make_up_writes_a_dot_env_with_fresh_random_secrets(tmp_path) -> None:
    import subprocess
    import sys

    example = env_example()
    first, second = tmp_path / "a.env", tmp_path / "b.env"
    for target in (first, second):
        subprocess.run(
            [sys.executable, str(ROOT / "docker" / "make_env.py"), str(ENV_EXAMPLE), str(target)],
            check=True,
        )

    def parse(path):
        return dict(
            line.split("=", 1)
            for line in path.read_text().splitlines()
            if "=" in line and not line.startswith("#")
        )

    a, b = parse(first), parse(second)
    for name in SECRET_NAMES:
        assert a[name] != example[name] and a[name] != b[name], name
    assert {k: v for k, v in a.items() if k not in SECRET_NAMES} == {
        k: v for k, v in example.items() if k not in SECRET_NAMES
    }
    assert oct(first.stat().st_mode & 0o777) == "0o600"
    import base64

    assert len(base64.urlsafe_b64decode(a["AIRFLOW_FERNET_KEY"])) == 32
