"""Strict validators of the Kubernetes resources in deploy/kubernetes/, each against a schema
from outside this repository, unknown fields refused everywhere:

- core resources: Kubernetes' own OpenAPI, as PyPI `kubernetes-validate` ships it (strict);
- ServingRuntime, InferenceService: the KServe SDK's generated models (PyPI `kserve`, read
  from its wheel: their `openapi_types`, `attribute_map` and required fields), with the
  Kubernetes types inside them checked against Kubernetes' OpenAPI as above;
- ServiceMonitor: the Prometheus Operator's CRD as PyPI `cloudcoil-models-prometheus-operator`
  ships it (pydantic models, made to refuse unknown fields);
- InferencePool: no package ships it; schemas/inferencepool-v1.json is written from the
  Gateway API Inference Extension's API reference.

Each validator returns a list of "path: problem" strings, empty when the resource is valid."""

import ast
import functools
import importlib.resources
import json
import os
import re
import zipfile
from pathlib import Path

import jsonschema
import kubernetes_validate
import pydantic
from referencing import Registry, Resource

HERE = Path(__file__).resolve().parent
# The oldest Kubernetes docs/kubernetes.md names and the newest kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.29.0", "1.37.0")
# scripts/setup downloads the KServe SDK's wheel here (it cannot share the test venv: it pins
# protobuf < 7); only its model files are read, nothing of it is imported.
_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
SCHEMA_WHEELS = Path(os.environ.get("TOKENMILL_SCHEMA_WHEELS",
                                    _CACHE / "tokenmill" / "schema-wheels"))
KSERVE_WHEEL = "kserve-0.21.0-py3-none-any.whl"


def validate_core(resource, version):
    try:
        kubernetes_validate.validate(resource, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"]
    return []


def has_core_schema(resource):
    try:
        kubernetes_validate.validate(resource, KUBERNETES_VERSIONS[-1], strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return False
    except kubernetes_validate.ValidationError:
        pass
    return True


@functools.cache
def _kubernetes_definitions(version):
    root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    version_dir = f"v{version}-local-strict"
    return json.loads((root / version_dir / "_definitions.json").read_text())


def _validate_kubernetes_type(value, definition, version, path):
    defs = _kubernetes_definitions(version)
    registry = Resource.from_contents(defs) @ Registry()
    schema = {"$ref": f"{defs['$id']}#/$defs/{definition}"}
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return [f"{path}/{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(value)]


def _kubernetes_definition_of(type_name, version):
    """The OpenAPI definition of a Kubernetes client type name: V1Container ->
    io.k8s.api.core.v1.Container, K8sIoApiAppsV1DeploymentStrategy ->
    io.k8s.api.apps.v1.DeploymentStrategy, ResourceQuantity -> ...resource.Quantity."""
    defs = _kubernetes_definitions(version)["$defs"]
    if type_name == "ResourceQuantity":
        return "io.k8s.apimachinery.pkg.api.resource.Quantity"
    if m := re.fullmatch(r"K8sIoApi([A-Z][a-z]+)V1(\w+)", type_name):
        key = f"io.k8s.api.{m.group(1).lower()}.v1.{m.group(2)}"
        return key if key in defs else None
    if m := re.fullmatch(r"V1(\w+)", type_name):
        for prefix in ("io.k8s.api.core.v1.", "io.k8s.apimachinery.pkg.apis.meta.v1."):
            if prefix + m.group(1) in defs:
                return prefix + m.group(1)
    return None


class _OpenApiModel:
    """One generated model class: JSON key -> (attribute, type), and the required keys."""

    def __init__(self, source, class_name):
        tree = ast.parse(source)
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
        values = {}
        for node in body.body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                if node.targets[0].id in ("openapi_types", "attribute_map"):
                    values[node.targets[0].id] = ast.literal_eval(node.value)
        types, keys = values["openapi_types"], values["attribute_map"]
        self.fields = {keys[attr]: type_name for attr, type_name in types.items()}
        required = re.findall(r"Invalid value for `(\w+)`, must not be `None`", source)
        self.required = {keys[attr] for attr in required if attr in keys}


@functools.cache
def _kserve_models():
    wheel_path = SCHEMA_WHEELS / KSERVE_WHEEL
    if not wheel_path.is_file():
        raise FileNotFoundError(f"{wheel_path} is missing: scripts/setup downloads it "
                                "(or set TOKENMILL_SCHEMA_WHEELS to a folder holding it)")
    models = {}
    with zipfile.ZipFile(wheel_path) as wheel:
        for name in wheel.namelist():
            if name.startswith("kserve/models/") and name.endswith(".py"):
                source = wheel.read(name).decode()
                for class_name in re.findall(r"^class (\w+)\(object\):", source, re.M):
                    models[class_name] = (source, class_name)
    return models


def _kserve_model(class_name):
    return _OpenApiModel(*_kserve_models()[class_name])


def _check_value(value, type_name, path, version, problems):
    if m := re.fullmatch(r"list\[(.+)\]", type_name):
        if not isinstance(value, list):
            problems.append(f"{path}: expected a list")
            return
        for i, item in enumerate(value):
            _check_value(item, m.group(1), f"{path}/{i}", version, problems)
    elif m := re.fullmatch(r"dict\(str, (.+)\)", type_name):
        if not isinstance(value, dict):
            problems.append(f"{path}: expected an object")
            return
        for key, item in value.items():
            _check_value(item, m.group(1), f"{path}/{key}", version, problems)
    elif type_name in ("str", "datetime"):
        if not isinstance(value, str):
            problems.append(f"{path}: expected a string, not {value!r}")
    elif type_name == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append(f"{path}: expected an integer, not {value!r}")
    elif type_name == "float":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            problems.append(f"{path}: expected a number, not {value!r}")
    elif type_name == "bool":
        if not isinstance(value, bool):
            problems.append(f"{path}: expected true or false, not {value!r}")
    elif type_name == "object":
        pass
    elif type_name in _kserve_models():
        _check_model(value, _kserve_model(type_name), path, version, problems)
    elif definition := _kubernetes_definition_of(type_name, version):
        problems.extend(_validate_kubernetes_type(value, definition, version, path))
    else:
        problems.append(f"{path}: no schema known for type {type_name}")


def _check_model(value, model, path, version, problems):
    if not isinstance(value, dict):
        problems.append(f"{path}: expected an object")
        return
    for key in sorted(model.required - value.keys()):
        problems.append(f"{path}/{key}: required")
    for key, item in value.items():
        if key not in model.fields:
            problems.append(f"{path}/{key}: unknown field")
        else:
            _check_value(item, model.fields[key], f"{path}/{key}", version, problems)


def validate_kserve(resource, class_name, version):
    problems = []
    _check_model(resource, _kserve_model(class_name), "", version, problems)
    return problems


@functools.cache
def _strict_prometheus_operator():
    from cloudcoil.models.prometheus_operator import v1  # noqa: E402  (slow: on first use)
    classes = [c for c in vars(v1).values() if isinstance(c, type)
               and issubclass(c, pydantic.BaseModel) and c.__module__ == v1.__name__]
    for c in classes:
        c.model_config["extra"] = "forbid"
    for c in classes:
        c.model_rebuild(force=True)
    return v1


def validate_service_monitor(resource):
    v1 = _strict_prometheus_operator()
    try:
        v1.ServiceMonitor.model_validate(resource)
    except pydantic.ValidationError as e:
        return [f"{'/'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()]
    return []


def validate_inference_pool(resource, version):
    schema = json.loads((HERE / "schemas" / "inferencepool-v1.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in validator.iter_errors(resource)]
    problems += _validate_kubernetes_type(resource.get("metadata", {}),
                                          "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
                                          version, "metadata")
    return problems


def validate(resource, version):
    """Problems of any resource the manifests hold; a kind without a schema is a problem."""
    api_version, kind = resource.get("apiVersion"), resource.get("kind")
    if (api_version, kind) == ("serving.kserve.io/v1alpha1", "ServingRuntime"):
        return validate_kserve(resource, "V1alpha1ServingRuntime", version)
    if (api_version, kind) == ("serving.kserve.io/v1beta1", "InferenceService"):
        return validate_kserve(resource, "V1beta1InferenceService", version)
    if (api_version, kind) == ("monitoring.coreos.com/v1", "ServiceMonitor"):
        return validate_service_monitor(resource)
    if (api_version, kind) == ("inference.networking.k8s.io/v1", "InferencePool"):
        return validate_inference_pool(resource, version)
    if has_core_schema(resource):
        return validate_core(resource, version)
    return [f"no schema for {api_version} {kind}"]
