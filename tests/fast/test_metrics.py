"""The observe profile, checked without Docker: the Grafana dashboard's queries against what
specgate's /metrics really exposes, and the Prometheus and Grafana files compose.yaml mounts.

Grafana shows an empty panel, not an error, for a metric or label that does not exist, so a
rename in app/metrics.py would otherwise go unnoticed until someone looks at the dashboard.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import MODEL, ClientFactory
from tests.metrics_text import sample
from tests.paths import REPO

ROOT = REPO
COMPOSE = ROOT / "docker" / "compose.yaml"
DASHBOARD = ROOT / "docker" / "grafana" / "dashboards" / "specgate.json"
RATE_WINDOW = "[$__rate_interval]"
# Prometheus adds these to every series it scrapes; /metrics itself never carries them.
TARGET_LABELS = {"job", "instance"}

# -- reading PromQL, enough for the dashboard's queries -------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
# A name not inside a number (1e3), with its matchers, and whether a call's "(" follows.
_NAME = re.compile(r"(?<![\w.])([a-zA-Z_:][\w:]*)\s*(\{[^}]*\})?\s*(\()?")
_MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)")
_RATED = re.compile(r"\b(?:rate|irate|increase)\(\s*([a-zA-Z_:][\w:]*)")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "group_left", "group_right"}


@dataclass(frozen=True)
class Query:
    selectors: dict[str, set[str]]  # metric name -> label names its matchers use
    grouping: set[str] = field(default_factory=set)  # labels of by (...), on (...) and the like
    rated: set[str] = field(default_factory=set)  # names read through rate() or increase()


def parse_promql(expr: str) -> Query:
    # Strings first: a matcher's value may hold anything, brackets included.
    text = _RANGE.sub("", _STRING.sub('""', expr))
    grouping = {
        label.strip()
        for clause in _GROUPING.finditer(text)
        for label in clause.group(1).split(",")
        if label.strip()
    }
    text = _GROUPING.sub(" ", text)
    selectors: dict[str, set[str]] = {}
    for name, matchers, call in _NAME.findall(text):
        if not call and name not in _KEYWORDS:
            selectors.setdefault(name, set()).update(_MATCHER.findall(matchers))
    return Query(selectors, grouping, set(_RATED.findall(text)))


def test_the_promql_reader_finds_names_labels_and_rates() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, route) (rate(a_bucket{x!="}[1m]"}[5m])))'
        " / on (route) group_left b * 1e3 and sum without (y) (c{z=~'.'})"
    )
    query = parse_promql(expr.replace("'", '"'))
    assert query.selectors == {"a_bucket": {"x"}, "b": set(), "c": {"z"}}
    assert query.grouping == {"le", "route", "y"}
    assert query.rated == {"a_bucket"}


# -- the dashboard --------------------------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels() -> list[dict[str, Any]]:
    """Every panel but the rows, including those inside a collapsed row."""
    found = []
    for panel in dashboard()["panels"]:
        found += panel.get("panels", []) if panel["type"] == "row" else [panel]
    return found


def queries() -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in panels() for target in panel["targets"]]


async def exposed_series(make_client: ClientFactory) -> dict[str, tuple[str, set[str]]]:
    """Sample name -> (family type, label names), from /metrics after a request per route.

    Labelled series appear only once observed; one request on each engine fills them all.
    """
    client, _ = await make_client()
    body = {"model": MODEL, "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 4}
    for header in ("on", "off"):
        response = await client.post(
            "/v1/chat/completions", json=body, headers={"X-Speculative": header}
        )
        assert response.status_code == 200, response.text
    series: dict[str, tuple[str, set[str]]] = {}
    for family in text_string_to_metric_families((await client.get("/metrics")).text):
        for found in family.samples:
            series.setdefault(found.name, (family.type, set()))[1].update(found.labels)
    return series


async def test_every_dashboard_query_reads_series_specgate_exposes(
    make_client: ClientFactory,
) -> None:
    series = await exposed_series(make_client)
    problems = []
    for title, expr in queries():
        query = parse_promql(expr)
        if not query.selectors:
            problems.append(f"{title}: no metric in {expr}")
        for name, matched in query.selectors.items():
            if name not in series:
                problems.append(f"{title}: {name} is not in /metrics")
                continue
            kind, labels = series[name]
            unknown = (matched | query.grouping) - labels - TARGET_LABELS
            if unknown:
                problems.append(f"{title}: {name} has no label {sorted(unknown)}")
            # A counter's raw value depends on when the process started; a gauge's rate is noise.
            if (kind in ("counter", "histogram")) != (name in query.rated):
                problems.append(f"{title}: {name} is a {kind}: rate() what counts, never a gauge")
    assert not problems, "\n".join(problems)


async def test_the_learned_speedup_gauge_is_what_the_router_reports(
    make_client: ClientFactory,
) -> None:
    # After requests have moved the estimates off their priors, not just at the start.
    client, _ = await make_client()
    body = {"model": MODEL, "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 8}
    for header in ("on", "off", "on"):
        await client.post("/v1/chat/completions", json=body, headers={"X-Speculative": header})
    classes = (await client.get("/v1/routing")).json()["classes"]
    metrics = (await client.get("/metrics")).text
    for workload, learned in classes.items():
        gauge = sample(metrics, "specgate_learned_speedup", workload_class=workload)
        assert gauge == pytest.approx(learned["expected_speedup"], abs=1e-4), workload


# The series that carry what issue 13 asks the dashboard to show.
SHOWN = {
    "specgate_requests_total": "requests and errors by route and class",
    "specgate_routing_decisions_total": "routing decisions by basis",
    "specgate_acceptance_rate_sum": "acceptance by class",
    "specgate_mean_accepted_length_sum": "mean accepted length by class",
    "specgate_learned_speedup": "the learned speed-ups",
    "specgate_time_to_first_token_seconds_bucket": "TTFT by route",
    "specgate_inter_token_latency_seconds_bucket": "ITL by route",
    "specgate_queued_requests": "queue depth",
    "specgate_rejected_requests_total": "rejections",
    "specgate_mid_stream_switches_total": "mid-stream switches",
}


def test_the_dashboard_shows_routing_speculation_latency_and_load() -> None:
    queried = {name for _, expr in queries() for name in parse_promql(expr).selectors}
    missing = [what for name, what in SHOWN.items() if name not in queried]
    assert not missing, missing


def test_the_dashboard_is_well_formed() -> None:
    board = dashboard()
    assert board["schemaVersion"] >= 39
    ids = [panel["id"] for panel in board["panels"]] + [
        inner["id"] for row in board["panels"] for inner in row.get("panels", [])
    ]
    assert len(ids) == len(set(ids))
    for panel in panels():
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        for target in panel["targets"]:
            # Windows follow the scrape interval; a fixed one breaks at some zoom level.
            windows = _RANGE.findall(_STRING.sub('""', target["expr"]))
            assert all(window == RATE_WINDOW for window in windows), target["expr"]


# -- compose's observe profile ----------------------------------------------------------------


def services() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    return loaded


def mounted(service: dict[str, Any], inside: str) -> Path:
    """The file or folder on this side of the service's bind mount that holds `inside`."""
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith(".") and (inside == target or inside.startswith(target + "/")):
            return (COMPOSE.parent / source / inside.removeprefix(target).lstrip("/")).resolve()
    pytest.fail(f"nothing is mounted at {inside}")


def published_port(service: dict[str, Any]) -> str:
    (port,) = service["ports"]
    return str(port).split(":")[-1]


def flag(service: dict[str, Any], name: str) -> str:
    (value,) = [arg.partition("=")[2] for arg in service["command"] if arg.startswith(f"{name}=")]
    return str(value)


def prometheus_config() -> tuple[Path, dict[str, Any]]:
    path = mounted(services()["prometheus"], flag(services()["prometheus"], "--config.file"))
    config: dict[str, Any] = yaml.safe_load(path.read_text())
    return path, config


def grafana_provisioning(kind: str) -> list[dict[str, Any]]:
    folder = mounted(services()["grafana"], f"/etc/grafana/provisioning/{kind}")
    return [yaml.safe_load(path.read_text()) for path in sorted(folder.glob("*.y*ml"))]


def test_the_observe_profile_holds_prometheus_and_grafana_only() -> None:
    observe = {name for name, s in services().items() if "observe" in s.get("profiles", [])}
    assert observe == {"prometheus", "grafana"}
    # `up grafana` brings Prometheus; neither waits for a specgate service, as either may run.
    assert services()["grafana"]["depends_on"] == ["prometheus"]
    assert "depends_on" not in services()["prometheus"]


def test_prometheus_scrapes_every_specgate_service_on_its_port() -> None:
    _, config = prometheus_config()
    specgate = {name for name, s in services().items() if s["image"].startswith("specgate:")}
    assert specgate == {"cpu", "gateway"}
    wanted = {f"{name}:{published_port(services()[name])}" for name in specgate}
    scraped = {
        target
        for job in config["scrape_configs"]
        if job.get("metrics_path", "/metrics") == "/metrics"
        for static in job["static_configs"]
        for target in static["targets"]
    }
    assert wanted <= scraped, wanted - scraped


def test_grafana_provisions_the_dashboard_over_the_prometheus_it_uses() -> None:
    _, config = prometheus_config()
    (sources,) = grafana_provisioning("datasources")
    (source,) = sources["datasources"]
    prometheus_port = published_port(services()["prometheus"])
    assert source["type"] == "prometheus"
    assert source["url"] == f"http://prometheus:{prometheus_port}"
    # $__rate_interval is four of these: it must be Prometheus's own scrape interval.
    assert source["jsonData"]["timeInterval"] == config["global"]["scrape_interval"]
    uids = {panel["datasource"]["uid"] for panel in panels()} | {
        target["datasource"]["uid"] for panel in panels() for target in panel["targets"]
    }
    assert uids == {source["uid"]}
    (providers,) = grafana_provisioning("dashboards")
    folders = [mounted(services()["grafana"], p["options"]["path"]) for p in providers["providers"]]
    assert [DASHBOARD] == [path for folder in folders for path in folder.glob("*.json")]
    home = services()["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert mounted(services()["grafana"], home) == DASHBOARD


# -- with the real tools, where this machine has them ------------------------------------------


def test_promtool_accepts_the_prometheus_config() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    path, _ = prometheus_config()
    result = subprocess.run(
        [promtool, "check", "config", "--syntax-only", path], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_docker_compose_accepts_the_observe_profile() -> None:
    docker = shutil.which("docker")
    if (
        docker is None
        or subprocess.run([docker, "compose", "version"], capture_output=True).returncode
    ):
        pytest.skip("docker compose is not installed")
    command = [docker, "compose", "-f", COMPOSE, "--profile", "observe", "config", "--quiet"]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_each_replicas_report_is_a_labelled_series() -> None:
    from app.metrics import GatewayMetrics

    metrics = GatewayMetrics()
    assert "specgate_replica_running" not in metrics.render().decode()  # no replicas: none
    metrics.replicas.reports = {
        "a1": {"running": 3, "waiting": 1, "kv_use": 0.25, "acceptance": {"code-edit": 0.8}},
        "b2": {"running": 0, "waiting": 0, "kv_use": 0.0, "acceptance": {}},
    }
    families = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
    running = {s.labels["replica"]: s.value for s in families["specgate_replica_running"].samples}
    assert running == {"a1": 3.0, "b2": 0.0}
    assert families["specgate_replica_kv_use"].samples[0].value == 0.25
    [landed] = families["specgate_replica_acceptance"].samples
    assert landed.labels == {"replica": "a1", "workload_class": "code-edit"} and landed.value == 0.8
