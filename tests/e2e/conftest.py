"""Fixtures of the gateway tests: one tokenmill-server on the default model per test module,
a tokenmill-gateway in front of it, the official OpenAI client on it and the model's name.
A test module that defines a fixture of the same name uses its own."""
import pytest

from gateway_harness import Gateway, backend_address, model_name
from server_harness import Server


@pytest.fixture(scope="module")
def server():
    with Server() as s:
        yield s


@pytest.fixture(scope="module")
def gateway(server):
    with Gateway(backend_address(server)) as g:
        yield g


@pytest.fixture(scope="module")
def client(gateway):
    return gateway.client()


@pytest.fixture(scope="module")
def model(gateway):
    return model_name(gateway)
