"""Every bad input gets its gRPC status and a message saying what to change; a full queue
gets RESOURCE_EXHAUSTED."""
import subprocess

import grpc
import pytest

from server_harness import RPC_TIMEOUT_S, SERVER_BIN, TINY_MODEL, Server, generate, pb2


@pytest.fixture(scope="module")
def server():
    with Server() as s:
        yield s


def chat(*messages):
    return pb2.Chat(messages=[pb2.ChatMessage(role=r, content=c) for r, c in messages])


INVALID = grpc.StatusCode.INVALID_ARGUMENT
PAST_CONTEXT = grpc.StatusCode.OUT_OF_RANGE  # the gateway's context_length_exceeded
BAD_GENERATE = [
    ("no input", pb2.GenerateRequest(), INVALID, "no input: set text, token_ids or chat"),
    ("empty text", pb2.GenerateRequest(text=""), INVALID, "text is empty"),
    ("empty ids", pb2.GenerateRequest(token_ids=pb2.TokenIds()), INVALID,
     "token_ids.ids is empty"),
    ("id outside vocab", pb2.GenerateRequest(token_ids=pb2.TokenIds(ids=[1, 49152])), INVALID,
     "token_ids.ids[1] = 49152 is outside the vocabulary (0..49151)"),
    ("prompt longer than the context",
     pb2.GenerateRequest(token_ids=pb2.TokenIds(ids=[100] * 8192)), PAST_CONTEXT,
     "the prompt is 8192 tokens; this server's limit is 8192"),
    ("prompt plus max_tokens too long", pb2.GenerateRequest(text="Hi", max_tokens=9000),
     PAST_CONTEXT, "lower max_tokens to at most 8191"),
    ("max_tokens 0", pb2.GenerateRequest(text="Hi", max_tokens=0), INVALID,
     "max_tokens must be at least 1"),
    ("negative temperature",
     pb2.GenerateRequest(text="Hi", sampling=pb2.SamplingParams(temperature=-1)), INVALID,
     "sampling.temperature must be >= 0"),
    ("top_p out of range", pb2.GenerateRequest(text="Hi", sampling=pb2.SamplingParams(top_p=2)),
     INVALID, "sampling.top_p must be in (0, 1]"),
    ("repetition_penalty",
     pb2.GenerateRequest(text="Hi", sampling=pb2.SamplingParams(repetition_penalty=0)), INVALID,
     "sampling.repetition_penalty must be > 0"),
    # Each sampling field's own errors: test_server_sampling.py.
    ("empty stop string", pb2.GenerateRequest(text="Hi", stop=["x", ""]), INVALID,
     "stop[1] is empty"),
    ("stop id outside vocab", pb2.GenerateRequest(text="Hi", stop_token_ids=[-1]), INVALID,
     "stop_token_ids[0] = -1 is outside the vocabulary"),
    ("empty chat", pb2.GenerateRequest(chat=pb2.Chat()), INVALID, "chat.messages is empty"),
    ("unknown chat role", pb2.GenerateRequest(chat=chat(("wizard", "hi"))), INVALID, "wizard"),
    # proto3 enums are open: a number no version of the API defines reaches the server as is.
    ("tool_choice mode out of range",
     pb2.GenerateRequest(chat=pb2.Chat(messages=[pb2.ChatMessage(role="user", content="hi")],
                                       tool_choice=pb2.ToolChoice(mode=7))), INVALID,
     "chat.tool_choice.mode 7 is not a ToolChoiceMode"),
    ("long request id", pb2.GenerateRequest(text="Hi", request_id="x" * 300), INVALID,
     "request_id is longer than 256 bytes"),
]


@pytest.mark.parametrize("name,request_,code,message", BAD_GENERATE,
                         ids=[c[0] for c in BAD_GENERATE])
def test_bad_generate_input(server, name, request_, code, message):
    with pytest.raises(grpc.RpcError) as error:
        generate(server.stub, request_)
    assert error.value.code() == code, error.value.details()
    assert message in error.value.details()


def test_bad_tokenize_and_detokenize_input(server):
    with pytest.raises(grpc.RpcError) as error:
        server.stub.Tokenize(pb2.TokenizeRequest(), timeout=RPC_TIMEOUT_S)
    assert error.value.code() == INVALID
    assert "set text or chat" in error.value.details()
    with pytest.raises(grpc.RpcError) as error:
        server.stub.Detokenize(pb2.DetokenizeRequest(token_ids=[5, 60000]), timeout=RPC_TIMEOUT_S)
    assert error.value.code() == INVALID
    assert "token_ids[1] = 60000 is outside the vocabulary" in error.value.details()


def test_chat_on_a_model_without_template_is_a_failed_precondition():
    with Server(model=TINY_MODEL, metrics=False) as tiny:
        with pytest.raises(grpc.RpcError) as error:
            generate(tiny.stub, pb2.GenerateRequest(chat=chat(("user", "Hi"))))
        assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "--chat-template" in error.value.details()
        # Plain text still works on that server.
        ids, _, _ = generate(tiny.stub, pb2.GenerateRequest(text="Once upon", max_tokens=4))
        assert len(ids) > 0


def test_beyond_max_queue_is_resource_exhausted():
    with Server("--max-num-seqs", "1", "--max-queue", "1") as s:
        def long_call(request_id):
            return s.stub.Generate(pb2.GenerateRequest(text="Once upon a time", max_tokens=4000,
                                                       ignore_eos=True, request_id=request_id),
                                   timeout=RPC_TIMEOUT_S)

        running = long_call("running")
        next(running)  # it runs: from its first token on, it is not counted as waiting
        waiting = long_call("waiting")
        s.wait_for_metrics(lambda m: waiting.done() or m["tokenmill:num_requests_waiting"] == 1)
        assert not waiting.done(), f"the second request was refused: {waiting.details()}"
        with pytest.raises(grpc.RpcError) as error:
            generate(s.stub, pb2.GenerateRequest(text="Hi", max_tokens=1))
        assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "retry later" in error.value.details()
        running.cancel()
        waiting.cancel()
        s.wait_for_metrics(lambda m: m["tokenmill:kv_cache_blocks_in_use"] == 0 and
                           m["tokenmill:num_requests_running"] == 0 and
                           m["tokenmill:num_requests_waiting"] == 0)
        # Room again: a new request is served.
        ids, _, _ = generate(s.stub, pb2.GenerateRequest(text="Hi", max_tokens=2))
        assert len(ids) == 2


def test_a_port_in_use_stops_the_second_server():
    """gRPC's default SO_REUSEPORT let a second server bind the same port and silently answer
    a share of the first one's calls; now the second stops, saying the port is taken."""
    with Server(model=TINY_MODEL, wait_ready=False, metrics=False) as first:
        second = subprocess.run(
            [str(SERVER_BIN), "--model", str(TINY_MODEL), "--port", str(first.port),
             "--metrics-port", "-1"], capture_output=True, text=True, timeout=RPC_TIMEOUT_S)
        assert second.returncode != 0, second.stderr
        assert f"cannot listen on 127.0.0.1:{first.port}: is the port taken?" in second.stderr
