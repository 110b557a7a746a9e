"""The Grafana dashboard (deploy/kubernetes/monitoring/) queries only metrics that the real
tokenmill-server (with --metrics-compat vllm, as deployed) and tokenmill-gateway serve."""

import json
import re
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from gateway_harness import Gateway, backend_address  # noqa: E402
from server_harness import Server  # noqa: E402

DASHBOARD = REPO / "deploy" / "kubernetes" / "monitoring" / "tokenmill-dashboard.json"
METRIC = re.compile(r"\b(?:tokenmill|tokenmill_gateway|vllm):[a-zA-Z0-9_]+")


def sample_names(text):
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture(scope="module")
def served():
    """Every sample name on both /metrics, after one request through the gateway (some
    gateway series exist only once a route has been used)."""
    with Server("--metrics-compat", "vllm") as server:
        with Gateway(backend_address(server)) as gateway:
            client = gateway.client()
            client.completions.create(model=client.models.list().data[0].id,
                                      prompt="Hello", max_tokens=2)
            names = sample_names(gateway.http.get("/metrics").text)
        url = f"http://127.0.0.1:{server.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            names |= sample_names(response.read().decode())
    return names


def dashboard_queries():
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queries += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return queries


def test_dashboard_queries_name_served_metrics(served):
    queries = dashboard_queries()
    assert len(queries) >= 10
    for query in queries:
        names = METRIC.findall(query)
        assert names, f"a query with no tokenmill metric: {query}"
        missing = [n for n in names if n not in served]
        assert not missing, f"{query}: not served: {missing}"


def test_every_panel_has_a_unique_id_and_place():
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    places = {(p["gridPos"]["x"], p["gridPos"]["y"]) for p in panels}
    assert len(places) == len(panels)
