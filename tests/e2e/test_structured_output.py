"""Structured output end to end: the official `openai` client through tokenmill-gateway and
tokenmill-server on the default model, and grpcio on the server directly. Outputs are checked
by independent references: `jsonschema` for JSON Schema, Python's `re.fullmatch` for regexes
(and for the GBNF grammars, written as the same language), set membership for choices."""
import concurrent.futures
import json
import re
from pathlib import Path

import gateway_harness
import grpc
import jsonschema
import openai
import pytest

from server_harness import generate, pb2

SCHEMAS = json.loads((Path(__file__).resolve().parents[1] / "data" / "structured_output" /
                      "schemas.json").read_text())
SEEDS = (1, 2, 3)
# Generous: the longest valid answers of the corpus are ~150 tokens.
MAX_TOKENS = 400
LONG_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def gateway(server):
    # 16 streams of constrained decoding keep the shared test machine's cores busy: health
    # checks every 2 s (deadline 2 s) instead of the harness's 0.2 s, so a slow answer does
    # not take the backend out of rotation in the middle of the test (503s).
    interval = gateway_harness.HEALTH_INTERVAL_S
    gateway_harness.HEALTH_INTERVAL_S = "2"
    try:
        with gateway_harness.Gateway(gateway_harness.backend_address(server)) as g:
            yield g
    finally:
        gateway_harness.HEALTH_INTERVAL_S = interval


@pytest.fixture(scope="module")
def slow_client(gateway):
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0,
                         timeout=LONG_TIMEOUT_S)


def schema_messages(case):
    return [{"role": "system", "content": "You answer with one JSON object and nothing else."},
            {"role": "user", "content": f"{case['prompt']}\nAnswer with JSON matching this "
                                        f"schema: {json.dumps(case['schema'])}"}]


def test_schema_corpus_validates_with_jsonschema(slow_client, model):
    assert len(SCHEMAS) >= 30

    def run(case, seed):
        out = slow_client.chat.completions.create(
            model=model, messages=schema_messages(case), temperature=1.0, seed=seed,
            max_tokens=MAX_TOKENS,
            response_format={"type": "json_schema",
                             "json_schema": {"name": case["name"], "schema": case["schema"],
                                             "strict": True}})
        return case, seed, out.choices[0]

    jobs = [(case, seed) for case in SCHEMAS for seed in SEEDS]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda job: run(*job), jobs))
    completed = 0
    cut = []
    for case, seed, choice in results:
        if choice.finish_reason != "stop":
            assert choice.finish_reason == "length"
            cut.append(f"{case['name']} seed {seed}: {choice.message.content[:200]!r}")
            continue
        completed += 1
        value = json.loads(choice.message.content)
        jsonschema.validate(value, case["schema"])  # raises with the path on a violation
    print(f"{completed} of {len(results)} completed within max_tokens; all validate")
    assert completed >= 0.9 * len(results), "cut by max_tokens:\n" + "\n".join(cut)


def test_json_object_and_legacy_fields(slow_client, model):
    schema = next(c for c in SCHEMAS if c["name"] == "weather")
    # Any object: at temperature 1 a small model may ramble inside a string past max_tokens,
    # so greedy must finish and sampled ones must parse when they do.
    for seed in (None, *SEEDS):
        out = slow_client.chat.completions.create(
            model=model, messages=schema_messages(schema), max_tokens=MAX_TOKENS,
            temperature=0.0 if seed is None else 1.0, seed=seed,
            response_format={"type": "json_object"})
        choice = out.choices[0]
        if seed is None:
            assert choice.finish_reason == "stop", choice.message.content
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(choice.message.content), dict), choice.message.content
    requests = [
        {"guided_json": schema["schema"]},
        {"json_schema": schema["schema"]},  # llama-server's field
        {"structured_outputs": {"json": json.dumps(schema["schema"])}},
    ]
    for fields in requests:
        for seed in SEEDS:
            out = slow_client.chat.completions.create(
                model=model, messages=schema_messages(schema), temperature=1.0, seed=seed,
                max_tokens=MAX_TOKENS, extra_body=fields)
            choice = out.choices[0]
            assert choice.finish_reason == "stop", (fields, choice.message.content)
            jsonschema.validate(json.loads(choice.message.content), schema["schema"])


REGEXES = [
    ("A US phone number: ", r"\(\d{3}\) \d{3}-\d{4}"),
    ("An email address: ", r"[a-z]{3,10}\.[a-z]{3,10}@example\.(com|org)"),
    ("Today's date: ", r"20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"),
    ("A hex color: ", r"#[0-9a-fA-F]{6}"),
    ("A yes/no answer with a reason: ", r"(Yes|No), because [a-z ]{5,40}\."),
]


def test_regex_outputs_fullmatch(client, model):
    for prompt, pattern in REGEXES:
        for seed in SEEDS:
            out = client.completions.create(
                model=model, prompt=prompt, temperature=1.0, seed=seed, max_tokens=64,
                extra_body={"structured_outputs": {"regex": pattern}})
            choice = out.choices[0]
            if choice.finish_reason == "stop":
                assert re.fullmatch(pattern, choice.text), (pattern, choice.text)
            else:  # cut by max_tokens: still a prefix the pattern could complete
                assert choice.finish_reason == "length", (pattern, choice.text)
        # vLLM's older field, greedy.
        out = client.completions.create(model=model, prompt=prompt, max_tokens=64,
                                        extra_body={"guided_regex": pattern})
        assert out.choices[0].finish_reason == "stop", (pattern, out.choices[0].text)
        assert re.fullmatch(pattern, out.choices[0].text), (pattern, out.choices[0].text)


def test_choice(client, model):
    choices = ["positive", "negative", "neutral"]
    out = client.chat.completions.create(
        model=model, n=4, temperature=1.0, seed=9, max_tokens=16,
        messages=[{"role": "user", "content": "Sentiment of 'I love this phone!'?"}],
        extra_body={"structured_outputs": {"choice": choices}})
    assert len(out.choices) == 4
    for choice in out.choices:
        assert choice.finish_reason == "stop"
        assert choice.message.content in choices


GRAMMARS = [
    # (GBNF, the same language as a Python regex)
    ('root ::= "The answer is " num "."\nnum ::= [1-9] [0-9]{0,2}',
     r"The answer is [1-9][0-9]{0,2}\."),
    ('root ::= item ("," " "? item){1,3}\nitem ::= ("red" | "green" | "blue")',
     r"(red|green|blue)(, ?(red|green|blue)){1,3}"),
    ('# a key = value line\nroot ::= key " = " value\nkey ::= [a-z_]+\n'
     'value ::= [0-9]+ | "\\"" [a-z ]* "\\""',
     r'[a-z_]+ = ([0-9]+|"[a-z ]*")'),
]


def test_gbnf_grammars(client, model):
    for gbnf, pattern in GRAMMARS:
        for field in ("grammar", "guided_grammar"):
            for seed in SEEDS:
                out = client.completions.create(
                    model=model, prompt="Output: ", temperature=1.0, seed=seed, max_tokens=48,
                    extra_body={field: gbnf})
                choice = out.choices[0]
                if choice.finish_reason == "stop":
                    assert re.fullmatch(pattern, choice.text), (gbnf, choice.text)


def test_stream_equals_whole(client, model):
    case = next(c for c in SCHEMAS if c["name"] == "order")
    fields = {"response_format": {"type": "json_schema",
                                  "json_schema": {"name": "order", "schema": case["schema"]}}}
    whole = client.chat.completions.create(model=model, messages=schema_messages(case),
                                           max_tokens=MAX_TOKENS, **fields)
    stream = client.chat.completions.create(model=model, messages=schema_messages(case),
                                            max_tokens=MAX_TOKENS, stream=True, **fields)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == whole.choices[0].message.content
    jsonschema.validate(json.loads(text), case["schema"])


def test_properties_come_in_the_order_written(client, model):
    schema = {"type": "object", "properties": {"zebra": {"type": "integer"},
                                               "apple": {"type": "boolean"},
                                               "mango": {"type": "string", "maxLength": 10}},
              "required": ["zebra", "apple", "mango"], "additionalProperties": False}
    out = client.chat.completions.create(
        model=model, max_tokens=60, messages=[{"role": "user", "content": "Fruit facts."}],
        response_format={"type": "json_schema", "json_schema": {"name": "f", "schema": schema}})
    pairs = json.loads(out.choices[0].message.content, object_pairs_hook=lambda kv: kv)
    assert [key for key, _ in pairs] == ["zebra", "apple", "mango"]


def test_max_tokens_cuts_with_length(client, model):
    case = next(c for c in SCHEMAS if c["name"] == "person")
    out = client.chat.completions.create(
        model=model, messages=schema_messages(case), max_tokens=5,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "person", "schema": case["schema"]}})
    assert out.choices[0].finish_reason == "length"
    assert out.usage.completion_tokens == 5
    assert out.choices[0].message.content.startswith("{")


def test_grpc_oneof(server):
    case = next(c for c in SCHEMAS if c["name"] == "config")
    ids, text, responses = generate(server.stub, pb2.GenerateRequest(
        text="A web server configuration as JSON: ", max_tokens=MAX_TOKENS, n=3,
        sampling=pb2.SamplingParams(temperature=1.0, seed=4,
                                    json_schema=json.dumps(case["schema"]))))
    finals = [r for r in responses if r.finish_reason != pb2.FINISH_REASON_UNSPECIFIED]
    assert sorted(r.index for r in finals) == [0, 1, 2]
    texts = {i: "" for i in range(3)}
    for r in responses:
        texts[r.index] += r.text
    for r in finals:
        if r.finish_reason == pb2.FINISH_REASON_STOP:
            jsonschema.validate(json.loads(texts[r.index]), case["schema"])
    ids, text, responses = generate(server.stub, pb2.GenerateRequest(
        text="Is water wet? ", max_tokens=8,
        sampling=pb2.SamplingParams(choice=pb2.Choice(choices=["yes", "no"]))))
    assert text in ("yes", "no")
    assert responses[-1].finish_reason == pb2.FINISH_REASON_STOP


BAD = [
    # (body fields, param, words in the message)
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {
            "a": {"type": "string", "format": "hostname", "unknownKeyword": 1}}}}}},
     "response_format", "unknownKeyword"),
    ({"structured_outputs": {"json": "{not json"}}, "structured_outputs", "structured_output"),
    ({"structured_outputs": {"json": '{"const": 1e999}'}}, "structured_outputs",
     "number overflow"),
    ({"structured_outputs": {"regex": "([a-z]"}}, "structured_outputs", "structured_output.regex"),
    ({"grammar": "root ::= ( \"a\""}, "grammar", "structured_output.gbnf"),
    ({"grammar": "root ::= undefined_rule"}, "grammar", "undefined_rule"),
    ({"guided_json": {"type": "object", "properties": {"bio": {"type": "string",
                                                             "maxLength": 1000000}}}},
     "guided_json", "at /properties/bio/maxLength: maxLength 1000000 is over the limit of 100000: "
     "use a smaller maxLength (or raise the server's --grammar-max-repetition)"),
    ({"guided_regex": "a{1,1000000}"}, "guided_regex", "structured_output.regex"),
    ({"guided_json": {"$ref": "#"}}, "guided_json", "a $ref that reaches itself before any value"),
]


def deep_ref_schema(depth):
    defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(depth)}
    defs[f"d{depth}"] = {"type": "integer"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def test_bad_constraints_are_400s_naming_the_field(gateway, server, model):
    cases = BAD + [({"guided_json": deep_ref_schema(500)}, "guided_json", "structured_output")]
    for fields, param, words in cases:
        for path, base in (("/v1/chat/completions",
                            {"messages": [{"role": "user", "content": "Hi"}]}),
                           ("/v1/completions", {"prompt": "Hi"})):
            response = gateway.http.post(path, json={"model": model, "max_tokens": 4, **base,
                                                     **fields})
            assert response.status_code == 400, (fields, response.text)
            error = response.json()["error"]
            assert error["param"] == param, (fields, error)
            assert words in error["message"], (fields, error)
    # gRPC: INVALID_ARGUMENT, nothing queued.
    with pytest.raises(grpc.RpcError) as refused:
        generate(server.stub, pb2.GenerateRequest(
            text="Hi", sampling=pb2.SamplingParams(regex="(unclosed")))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "structured_output.regex" in refused.value.details()
    with pytest.raises(grpc.RpcError) as refused:  # nlohmann throws out_of_range for it
        generate(server.stub, pb2.GenerateRequest(
            text="Hi", sampling=pb2.SamplingParams(json_schema='{"const": 1e999}')))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "number overflow" in refused.value.details()
    with pytest.raises(grpc.RpcError) as refused:
        generate(server.stub, pb2.GenerateRequest(
            text="Hi", sampling=pb2.SamplingParams(grammar="root ::= \"a\"", min_tokens=2),
            max_tokens=4))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "min_tokens" in refused.value.details()
