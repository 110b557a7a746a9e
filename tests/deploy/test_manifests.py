"""deploy/kubernetes/: every kustomization renders with `kubectl kustomize`, every resource it
renders is valid against its schema (resource_schemas.py), and the pieces fit together: the
drain timings, the probes, the resource requests against the model, the pool's ports and
labels against the pods'."""

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import resource_schemas

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "kubernetes"
MODELS_DIR = Path(os.environ.get("TOKENMILL_MODELS_DIR", REPO / "models"))
KUSTOMIZATIONS = ["overlays/cpu", "overlays/gpu", "kserve", "inference-gateway", "monitoring"]
MIB = 1 << 20
# What the server adds to --drain-timeout before it exits (server/grpc/main.cc): up to 5 s of
# final writes, then up to 1 s of gRPC shutdown.
SERVER_EXIT_AFTER_DRAIN_S = 5 + 1
RUNTIME_OVERHEAD = 256 * MIB  # threads, activations, allocator: what the sizing comment says


def kubectl():
    """The venv's (requirements-test.txt pins it), else one on PATH."""
    pinned = Path(sys.executable).parent / "kubectl"
    found = str(pinned) if pinned.is_file() else shutil.which("kubectl")
    assert found, "kubectl is missing: scripts/setup installs it into .venv/"
    return found


def render(kustomization):
    out = subprocess.run([kubectl(), "kustomize", str(DEPLOY / kustomization)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"kubectl kustomize {kustomization}: {out.stderr}"
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


@pytest.fixture(scope="module")
def rendered():
    return {k: render(k) for k in KUSTOMIZATIONS}


def find(resources, kind, name=None):
    matches = [r for r in resources if r["kind"] == kind
               and (name is None or r["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def container(pod_spec, name):
    return next(c for c in pod_spec["containers"] if c["name"] == name)


def env(c):
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def quantity_bytes(q):
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)?", str(q))
    assert m, f"unexpected quantity {q}"
    return int(m.group(1)) * units.get(m.group(2), 1)


def kv_cache_bytes(value):  # TOKENMILL_KV_CACHE_MEMORY in the manifests: MiB or GiB
    m = re.fullmatch(r"(\d+)(MiB|GiB)", value)
    assert m, f"unexpected --kv-cache-memory {value}"
    return int(m.group(1)) * (MIB if m.group(2) == "MiB" else 1 << 30)


def pre_stop_sleep(c):
    command = c["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep", command
    return int(command[1])


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
@pytest.mark.parametrize("version", resource_schemas.KUBERNETES_VERSIONS)
def test_every_resource_is_valid(rendered, kustomization, version):
    assert rendered[kustomization]
    for resource in rendered[kustomization]:
        problems = resource_schemas.validate(resource, version)
        assert not problems, f"{resource['kind']} {resource['metadata']['name']}: {problems}"


def test_validators_refuse_unknown_and_missing_fields(rendered):
    """Each schema source catches a typo: the validations above could fail."""
    version = resource_schemas.KUBERNETES_VERSIONS[-1]
    cases = []
    deployment = copy.deepcopy(find(rendered["overlays/cpu"], "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    cases.append(deployment)
    runtime = copy.deepcopy(find(rendered["kserve"], "ServingRuntime"))
    runtime["spec"]["containers"][1]["env"][0]["valu"] = "x"
    cases.append(runtime)
    service = copy.deepcopy(find(rendered["kserve"], "InferenceService"))
    service["spec"]["predictor"]["model"]["runtme"] = "tokenmill"
    cases.append(service)
    monitor = copy.deepcopy(find(rendered["monitoring"], "ServiceMonitor"))
    monitor["spec"]["endpoints"][0]["prot"] = "metrics"
    cases.append(monitor)
    pool = copy.deepcopy(find(rendered["inference-gateway"], "InferencePool"))
    del pool["spec"]["endpointPickerRef"]["port"]  # required for a Service
    cases.append(pool)
    pool = copy.deepcopy(pool)
    pool["spec"]["targetPorts"] = [{"number": 8000}, {"number": 8001}]  # v1.0: one port
    cases.append(pool)
    for resource in cases:
        assert resource_schemas.validate(resource, version), resource["kind"]


@pytest.mark.parametrize("overlay", ["overlays/cpu", "overlays/gpu"])
def test_grace_period_covers_the_drain(rendered, overlay):
    pod = find(rendered[overlay], "Deployment")["spec"]["template"]["spec"]
    server, gateway = container(pod, "server"), container(pod, "gateway")
    drain = float(env(server)["TOKENMILL_DRAIN_TIMEOUT"])
    server_done = pre_stop_sleep(server) + drain + SERVER_EXIT_AFTER_DRAIN_S
    # The gateway relays the last streams: it gets SIGTERM only once the server is done.
    assert pre_stop_sleep(gateway) >= server_done - 1
    assert pod["terminationGracePeriodSeconds"] >= max(server_done, pre_stop_sleep(gateway) + 1)


@pytest.mark.parametrize("overlay", ["overlays/cpu", "overlays/gpu"])
def test_probes_ask_the_servers_health(rendered, overlay):
    pod = find(rendered[overlay], "Deployment")["spec"]["template"]["spec"]
    server = container(pod, "server")
    address = f"127.0.0.1:{env(server)['TOKENMILL_PORT']}"
    for probe in ("startupProbe", "readinessProbe"):
        command = server[probe]["exec"]["command"]
        assert command[:2] == ["tokenmill-health", address], (probe, command)
    startup = server["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300  # a model's load
    # Liveness must not fail while draining (health NOT_SERVING then): HTTP, not health.
    assert server["livenessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    # gRPC only on loopback, the metrics on the pod's address.
    assert env(server)["TOKENMILL_HOST"] == "127.0.0.1"
    assert env(server)["TOKENMILL_METRICS_HOST"] == "0.0.0.0"
    gateway = container(pod, "gateway")
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/health"
    assert env(gateway)["TOKENMILL_GATEWAY_BACKEND"] == address


def test_cpu_memory_request_fits_the_model_and_kv_cache(rendered):
    pod = find(rendered["overlays/cpu"], "Deployment")["spec"]["template"]["spec"]
    server = container(pod, "server")
    model = MODELS_DIR / Path(env(server)["TOKENMILL_MODEL"]).name
    assert model.is_file(), f"{model} is missing: scripts/setup fetches it"
    # The mapped file, the CPU's regrouped copy of its weights, the KV cache, the runtime.
    needed = 2 * model.stat().st_size + kv_cache_bytes(env(server)["TOKENMILL_KV_CACHE_MEMORY"])
    needed += RUNTIME_OVERHEAD
    for bound in ("requests", "limits"):
        assert quantity_bytes(server["resources"][bound]["memory"]) >= needed, bound
    assert server["env"][-1]["valueFrom"]["resourceFieldRef"]["resource"] == "limits.cpu"


def test_gpu_overlay_asks_for_a_gpu_and_runs_on_it(rendered):
    pod = find(rendered["overlays/gpu"], "Deployment")["spec"]["template"]["spec"]
    server = container(pod, "server")
    assert server["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert env(server)["TOKENMILL_DEVICE"] == "cuda"
    assert 0 < float(env(server)["TOKENMILL_KV_CACHE_MEMORY"]) < 1  # of the GPU's free memory
    assert all(c["image"].endswith(":cuda") for c in pod["containers"])
    cpu_pod = find(rendered["overlays/cpu"], "Deployment")["spec"]["template"]["spec"]
    assert all(c["image"].endswith(":cpu") for c in cpu_pod["containers"])
    assert "nvidia.com/gpu" not in container(cpu_pod, "server")["resources"]["limits"]


def test_metrics_compat_is_on_wherever_a_server_runs(rendered):
    servers = [container(find(rendered[o], "Deployment")["spec"]["template"]["spec"], "server")
               for o in ("overlays/cpu", "overlays/gpu")]
    servers.append(container(find(rendered["kserve"], "ServingRuntime")["spec"], "server"))
    for server in servers:
        assert env(server)["TOKENMILL_METRICS_COMPAT"] == "vllm"


def test_services_and_budget_select_the_pods(rendered):
    resources = rendered["overlays/cpu"]
    pod = find(resources, "Deployment")["spec"]["template"]
    labels = pod["metadata"]["labels"]
    port_names = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    service = find(resources, "Service")
    assert service["spec"]["selector"].items() <= labels.items()
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= port_names
    budget = find(resources, "PodDisruptionBudget")
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    claim = find(resources, "PersistentVolumeClaim")["metadata"]["name"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"]["claimName"] == claim
    monitor = find(rendered["monitoring"], "ServiceMonitor")
    service_labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service_labels.items()
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {
        p["name"] for p in service["spec"]["ports"]}


def test_inference_pool_reaches_the_pods_and_its_picker(rendered):
    pod = find(rendered["overlays/cpu"], "Deployment")["spec"]["template"]
    gateway_port = container(pod["spec"], "gateway")["ports"][0]["containerPort"]
    metrics_port = next(p["containerPort"] for p in container(pod["spec"], "server")["ports"]
                        if p["name"] == "metrics")
    resources = rendered["inference-gateway"]
    pool = find(resources, "InferencePool")
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pool["spec"]["targetPorts"] == [{"number": gateway_port}]
    ref = pool["spec"]["endpointPickerRef"]
    picker_service = find(resources, "Service", ref["name"])
    assert ref["port"]["number"] in {p["port"] for p in picker_service["spec"]["ports"]}
    picker = find(resources, "Deployment", ref["name"])["spec"]["template"]["spec"]
    args = dict(a.lstrip("-").split("=", 1) for a in container(picker, "epp")["args"])
    assert args["pool-name"] == pool["metadata"]["name"]
    assert int(args["model-server-metrics-port"]) == metrics_port
    # The config file is the generated ConfigMap's, mounted where --config-file points.
    mount = container(picker, "epp")["volumeMounts"][0]
    config_map = next(v["configMap"]["name"] for v in picker["volumes"]
                      if v["name"] == mount["name"])
    config_name = Path(args["config-file"]).name
    assert Path(args["config-file"]).parent == Path(mount["mountPath"])
    config = yaml.safe_load(find(resources, "ConfigMap", config_map)["data"][config_name])
    assert config["kind"] == "EndpointPickerConfig"
    declared = {p.get("name", p["type"]) for p in config["plugins"]}
    for profile in config["schedulingProfiles"]:
        assert {p["pluginRef"] for p in profile["plugins"]} <= declared


ROUTER_LABEL = "tokenmill.io/router"


def selects_only_routers(peer):
    """A NetworkPolicy peer that admits only pods labelled as routers (in any namespace)."""
    if "ipBlock" in peer or "podSelector" not in peer:
        return False
    selector = peer["podSelector"]
    if selector.get("matchLabels", {}).get(ROUTER_LABEL) == "true":
        return True
    return {"key": ROUTER_LABEL, "operator": "In", "values": ["true"]} in selector.get(
        "matchExpressions", [])


def rules_admitting(policy, port_name, port_number):
    """The ingress rules that let traffic reach this container port."""
    return [rule for rule in policy["spec"].get("ingress", [])
            if any(p.get("port") in (port_name, port_number) for p in rule["ports"])]


@pytest.mark.parametrize("overlay", ["overlays/cpu", "overlays/gpu"])
def test_prompt_data_ports_are_bound_explicitly_and_only_routers_reach_them(rendered, overlay):
    """The KV events carry every cached prompt's token ids (issue 35): the manifests name the
    interface they bind (the server's default is loopback), and a NetworkPolicy selecting the
    pods lets only routers reach them and gRPC, Prometheus and routers the metrics."""
    resources = rendered[overlay]
    pod = find(resources, "Deployment")["spec"]["template"]
    server = container(pod["spec"], "server")
    server_env = env(server)
    assert server_env["TOKENMILL_KV_EVENTS_ENDPOINT"].startswith("tcp://*:")
    assert server_env["TOKENMILL_KV_EVENTS_HOST"] == "0.0.0.0"  # named, not a default
    assert server_env["TOKENMILL_HOST"] == "127.0.0.1"
    policy = find(resources, "NetworkPolicy")
    assert "Ingress" in policy["spec"]["policyTypes"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    rules = policy["spec"]["ingress"]
    assert all(rule.get("ports") for rule in rules), "a rule without ports opens every port"
    named = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"]
             for p in c.get("ports", [])}
    for rule in rules:
        for port in rule["ports"]:
            assert isinstance(port["port"], int) or port["port"] in named, port
    grpc_port = int(server_env["TOKENMILL_PORT"])
    for name, number in [("kv-events", named["kv-events"]), ("kv-replay", named["kv-replay"]),
                         ("grpc", grpc_port)]:
        admitting = rules_admitting(policy, name, number)
        assert admitting or name == "grpc", name
        for rule in admitting:
            assert rule.get("from") and all(selects_only_routers(p) for p in rule["from"]), name
    metrics_rules = rules_admitting(policy, "metrics", named["metrics"])
    assert metrics_rules
    for rule in metrics_rules:
        for peer in rule.get("from") or [{}]:
            prometheus = peer.keys() == {"namespaceSelector"} and peer["namespaceSelector"].get(
                "matchLabels", {}).get("kubernetes.io/metadata.name") == "monitoring"
            assert prometheus or selects_only_routers(peer), peer
    assert rules_admitting(policy, "http", named["http"])
    # The endpoint picker reads the metrics: it is a router.
    picker = find(rendered["inference-gateway"], "Deployment", "tokenmill-epp")
    assert picker["spec"]["template"]["metadata"]["labels"][ROUTER_LABEL] == "true"
