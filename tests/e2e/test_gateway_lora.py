"""LoRA adapters through tokenmill-gateway: two servers of a tiny llama (stories260K's
vocabulary, llama2's chat template), one with two adapters (--lora, written by
tests/reference/make_lora_adapter.py) and one without, behind one gateway, driven by the
official `openai` package:
- /v1/models lists each adapter as vLLM lists LoRA modules, its parent the base model;
- an adapter's name routes every generating route (completions, chat completions, Responses,
  Anthropic Messages) to the server that has it, which generates with it: each equals the
  server's own Generate with that model, and the adapters' and base model's outputs differ;
- an unknown name is a 404 model_not_found, and so is an adapter's on /v1/embeddings (Embed
  runs the base model only)."""
import sys
import time

import openai
import pytest

from gateway_harness import Gateway, backend_address
from server_harness import REPO, TINY_MODEL, Server, generate, pb2

sys.path.insert(0, str(REPO / "tests" / "reference"))
from make_lora_adapter import write_adapter  # noqa: E402
from tiny_families import llama  # noqa: E402

BASE = "tiny-llama"  # the base model's id: its file's name
TEMPLATE = REPO / "tests" / "data" / "chat_templates" / "llama2.jinja"
PROMPT = [1, 50, 60, 70, 80, 90, 100]
MAX_TOKENS = 8
HELLO = "Once upon a time"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """(gateway, server with the adapters, server without)."""
    if not TINY_MODEL.exists():
        pytest.skip(f"{TINY_MODEL} is missing: run scripts/setup")
    d = tmp_path_factory.mktemp("gateway-lora")
    base = d / f"{BASE}.gguf"
    llama.write(str(base), vocabulary_from=str(TINY_MODEL))
    flags = ["--chat-template", TEMPLATE]
    for name, seed in (("a", 3), ("b", 4)):
        path = d / f"{name}.gguf"
        write_adapter(str(base), str(path), rank=4, alpha=8, seed=seed, gain=1.0)
        flags += ["--lora", f"{name}={path}"]
    with Server(*flags, model=base) as adapted, \
            Server("--chat-template", TEMPLATE, model=base) as plain, \
            Gateway(backend_address(adapted), backend_address(plain)) as gateway:
        wait_both_ready(gateway)
        yield gateway, adapted, plain


def wait_both_ready(gateway):
    deadline = time.monotonic() + 60
    while sum(v for k, v in gateway.metrics().items()
              if k.startswith("tokenmill_gateway:backend_healthy{")) < 2:
        assert time.monotonic() < deadline, "a backend never became ready"
        time.sleep(0.05)


def routed(gateway, server):
    """Generate calls the gateway has sent `server`."""
    return gateway.metrics().get(
        f"tokenmill_gateway:backend_requests_total{{backend={backend_address(server)}}}", 0)


def server_text(server, model, **prompt):
    request = pb2.GenerateRequest(max_tokens=MAX_TOKENS, model=model, **prompt)
    return generate(server.stub, request)[1]


def test_models_lists_the_adapters_with_their_parent(stack):
    gateway, _, _ = stack
    client = gateway.client()
    models = {m.id: m for m in client.models.list().data}
    assert list(models) == [BASE, "a", "b"]
    base = models[BASE].model_dump()
    assert base["root"] == BASE and base["parent"] is None
    for name in ("a", "b"):
        entry = client.models.retrieve(name).model_dump()
        assert entry == models[name].model_dump()
        assert entry["parent"] == BASE and entry["root"] == BASE
        assert entry["owned_by"] == "tokenmill" and entry["object"] == "model"
        assert entry["created"] == base["created"]
        assert entry["max_model_len"] == base["max_model_len"]


def test_completions_of_an_adapter_are_its_servers(stack):
    gateway, adapted, plain = stack
    client = gateway.client()
    texts = {}
    for model in (BASE, "a", "b"):
        before = routed(gateway, adapted)
        out = client.completions.create(model=model, prompt=PROMPT, max_tokens=MAX_TOKENS,
                                        temperature=0, extra_body={"ignore_eos": True})
        texts[model] = out.choices[0].text
        assert out.model == model
        if model != BASE:
            assert routed(gateway, adapted) == before + 1  # never the server without it
        want = server_text(adapted, "" if model == BASE else model,
                           token_ids=pb2.TokenIds(ids=PROMPT), ignore_eos=True)
        assert texts[model] == want, model
    assert len(set(texts.values())) == 3, texts
    # Streamed, the same.
    stream = client.completions.create(model="a", prompt=PROMPT, max_tokens=MAX_TOKENS,
                                       temperature=0, stream=True,
                                       extra_body={"ignore_eos": True})
    chunks = list(stream)
    assert {c.model for c in chunks} == {"a"}
    assert "".join(c.choices[0].text for c in chunks if c.choices) == texts["a"]


def test_every_generating_route_routes_the_adapter(stack):
    gateway, adapted, _ = stack
    client = gateway.client()
    chat = pb2.Chat(messages=[pb2.ChatMessage(role="user", content=HELLO)])
    want = server_text(adapted, "b", chat=chat)
    assert want != server_text(adapted, "", chat=chat)
    before = routed(gateway, adapted)
    completion = client.chat.completions.create(
        model="b", messages=[{"role": "user", "content": HELLO}], max_tokens=MAX_TOKENS,
        temperature=0)
    assert (completion.model, completion.choices[0].message.content) == ("b", want)
    response = client.responses.create(model="b", input=HELLO, max_output_tokens=MAX_TOKENS,
                                       temperature=0)
    assert (response.model, response.output_text) == ("b", want)
    message = gateway.http.post("/v1/messages", json={
        "model": "b", "max_tokens": MAX_TOKENS, "temperature": 0,
        "messages": [{"role": "user", "content": HELLO}]})
    assert message.status_code == 200, message.text
    body = message.json()
    assert (body["model"], body["content"][0]["text"] if body["content"] else "") == ("b", want)
    assert routed(gateway, adapted) == before + 3


def test_unknown_models_and_adapters_on_embeddings_are_404(stack):
    gateway, _, _ = stack
    client = gateway.client()
    with pytest.raises(openai.NotFoundError) as error:
        client.completions.create(model="c", prompt=PROMPT, max_tokens=1)
    assert error.value.body["code"] == "model_not_found"
    assert error.value.body["param"] == "model"
    with pytest.raises(openai.NotFoundError) as error:
        client.models.retrieve("c")
    with pytest.raises(openai.NotFoundError) as error:
        client.embeddings.create(model="a", input="hello")
    assert error.value.body["code"] == "model_not_found"
    assert "LoRA adapter" in error.value.body["message"]
