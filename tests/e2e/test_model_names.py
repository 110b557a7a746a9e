"""The model's names, as a user coming from vLLM or llama-server expects them: by default the
model file's name without .gguf, or the server's --served-model-name aliases, each routed by
the gateway and listed by /v1/models; the metrics' model_name is the API's id."""

import subprocess
import time
import urllib.request

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway_harness import Gateway, backend_address
from server_harness import DEFAULT_MODEL, SERVER_BIN, Server, pb2

DEFAULT_ID = "SmolLM2-135M-Instruct.Q4_1"
HELLO = [{"role": "user", "content": "Hello!"}]


def metric_model_names(server):
    """The model_name labels of the server's /metrics samples."""
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {sample.labels["model_name"] for family in text_string_to_metric_families(text)
            for sample in family.samples if "model_name" in sample.labels}


def test_without_a_name_the_model_is_its_file_name():
    before = int(time.time())
    with Server() as server, Gateway(backend_address(server)) as gateway:
        client = gateway.client()
        models = client.models.list().data
        assert [m.id for m in models] == [DEFAULT_ID]
        assert models[0].owned_by == "tokenmill"
        assert before <= models[0].created <= int(time.time())
        chat = client.chat.completions.create(model=DEFAULT_ID, messages=HELLO, max_tokens=2)
        assert chat.model == DEFAULT_ID and chat.usage.completion_tokens >= 1
        assert metric_model_names(server) == {DEFAULT_ID}
        info = server.stub.GetModelInfo(pb2.GetModelInfoRequest())
        assert (info.name, list(info.served_model_names)) == (DEFAULT_ID, [DEFAULT_ID])


@pytest.fixture(scope="module")
def aliased():
    with Server("--served-model-name", "smol", "org/tiny-chat") as server, \
            Gateway(backend_address(server)) as gateway:
        yield server, gateway


def test_every_alias_is_listed_and_answers(aliased):
    server, gateway = aliased
    client = gateway.client()
    models = client.models.list().data
    assert [m.id for m in models] == ["smol", "org/tiny-chat"]
    assert models[0].created == models[1].created > 0
    assert client.models.retrieve("org/tiny-chat").id == "org/tiny-chat"
    assert f"backend {backend_address(server)} is ready (model smol, org/tiny-chat)" in \
        gateway.log_text()
    for name in ("smol", "org/tiny-chat"):
        chat = client.chat.completions.create(model=name, messages=HELLO, max_tokens=2)
        assert chat.model == "smol"  # the model's id, as vLLM answers
        completion = client.completions.create(model=name, prompt="Hi", max_tokens=1)
        assert completion.model == "smol"


def test_an_unknown_name_is_404_model_not_found(aliased):
    _, gateway = aliased
    with pytest.raises(openai.NotFoundError) as error:
        gateway.client().chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1",
                                                 messages=HELLO, max_tokens=1)
    assert error.value.body["code"] == "model_not_found"
    assert error.value.body["param"] == "model"


def test_the_metrics_carry_the_first_name(aliased):
    server, _ = aliased
    assert metric_model_names(server) == {"smol"}
    info = server.stub.GetModelInfo(pb2.GetModelInfoRequest())
    assert (info.name, list(info.served_model_names)) == ("smol", ["smol", "org/tiny-chat"])


def test_the_gateways_names_replace_the_servers(aliased):
    server, _ = aliased
    with Gateway(backend_address(server), extra_args=["--served-model-name", "a", "b"]) as g:
        client = g.client()
        assert [m.id for m in client.models.list().data] == ["a", "b"]
        assert client.completions.create(model="b", prompt="Hi", max_tokens=1).model == "a"
        with pytest.raises(openai.NotFoundError):
            client.completions.create(model="smol", prompt="Hi", max_tokens=1)


def test_names_from_the_environment():
    with Server(env={"TOKENMILL_SERVED_MODEL_NAME": "first,second"}, metrics=False) as server:
        info = server.stub.GetModelInfo(pb2.GetModelInfoRequest())
        assert list(info.served_model_names) == ["first", "second"]


@pytest.mark.parametrize("names,message", [
    (["a b"], "--served-model-name 'a b': a name needs at least one character and no spaces"),
    ([""], "--served-model-name '': a name needs at least one character"),
    (["x", "x"], "--served-model-name 'x' is given twice"),
])
def test_a_bad_name_stops_the_start_naming_the_flag(names, message):
    result = subprocess.run([str(SERVER_BIN), "--model", str(DEFAULT_MODEL), "--port", "0",
                             "--metrics-port", "-1", "--served-model-name", *names],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert message in result.stderr
