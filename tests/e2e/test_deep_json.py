"""JSON nested deeper than the one bound on client JSON (64 levels of lists and objects,
common/json_nesting.h) is refused, naming its field, on every way in: gRPC Generate and
Tokenize, and the gateway's chat completions, Responses function_call items and /tokenize.
Tool-call arguments are JSON inside a string, so the body's own bound never saw them: 100000
levels of them (800 KB) overflowed the server's stack and killed it (issue 35). After each
refusal the server still answers."""
import grpc
import pytest

from gateway_harness import model_name
from server_harness import generate, pb2

LEVELS = 100000
DEEP = '{"a":' * LEVELS + "1" + "}" * LEVELS
REFUSAL = "nests deeper than 64 levels of lists and objects"


def grpc_chat(arguments):
    return pb2.Chat(messages=[
        pb2.ChatMessage(role="user", content="Weather in Paris?"),
        pb2.ChatMessage(role="assistant",
                        tool_calls=[pb2.ToolCall(id="call_1", name="get_weather",
                                                 arguments=arguments)]),
        pb2.ChatMessage(role="tool", tool_call_id="call_1", content="sunny")])


def openai_messages(arguments):
    return [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]


def assert_server_answers(server):
    assert server.proc.poll() is None, "the server died:\n" + server.log_text()
    ids, _, _ = generate(server.stub, pb2.GenerateRequest(text="Once upon a time", max_tokens=4))
    assert len(ids) == 4


@pytest.mark.parametrize("call", ["Generate", "Tokenize"])
def test_grpc_refuses_deep_tool_arguments_and_lives(server, call):
    chat = grpc_chat(DEEP)
    with pytest.raises(grpc.RpcError) as refused:
        if call == "Generate":
            generate(server.stub, pb2.GenerateRequest(chat=chat, max_tokens=4))
        else:
            server.stub.Tokenize(pb2.TokenizeRequest(chat=chat), timeout=60)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ("chat.messages[1].tool_calls[0].arguments " + REFUSAL) in refused.value.details()
    # The other JSON text fields of a chat, through the same bound.
    for field in ("tools_json", "template_kwargs_json"):
        chat = grpc_chat('{"city": "Paris"}')
        setattr(chat, field, ("[" + DEEP + "]") if field == "tools_json" else DEEP)
        with pytest.raises(grpc.RpcError) as refused:
            generate(server.stub, pb2.GenerateRequest(chat=chat, max_tokens=4))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"chat.{field} {REFUSAL}" in refused.value.details()
    assert_server_answers(server)


def gateway_cases(model):
    return [
        ("/v1/chat/completions", {"model": model, "max_tokens": 4,
                                  "messages": openai_messages(DEEP)},
         "messages[1].tool_calls[0].function.arguments"),
        ("/tokenize", {"model": model, "messages": openai_messages(DEEP)},
         "messages[1].tool_calls[0].function.arguments"),
        ("/v1/responses", {"model": model, "max_output_tokens": 4, "input": [
            {"type": "message", "role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather",
             "arguments": DEEP},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]},
         "input[1].arguments"),
    ]


@pytest.mark.parametrize("case", range(3), ids=["chat", "tokenize", "responses"])
def test_gateway_refuses_deep_tool_arguments_and_lives(gateway, server, case):
    path, body, field = gateway_cases(model_name(gateway))[case]
    response = gateway.http.post(path, json=body)
    assert response.status_code == 400, response.text
    assert f"{field} {REFUSAL}" in response.json()["error"]["message"]
    assert_server_answers(server)
    answer = gateway.http.post("/v1/chat/completions", json={
        "model": model_name(gateway), "max_tokens": 4,
        "messages": [{"role": "user", "content": "Hi"}]})
    assert answer.status_code == 200, answer.text
