"""tokenmill-server's KV cache events (--kv-events-endpoint, --kv-events-replay-endpoint) as a
KV-aware router reads them: a pyzmq subscriber decodes every batch with msgspec structs written
from vLLM's definitions (vllm/distributed/kv_events.py: array_like, tagged), and the state it
rebuilds (stored minus removed, cleared on reset) must equal the server's own dump
(/kv_events/state) after prefix sharing and evictions; a subscriber that joins late rebuilds
the same state from the replay socket; stored blocks hold the prompt's real token ids and name
the LoRA adapter that computed them. With several models, each publishes on its own topic with
its own sequence numbers and replay, /kv_events/state?model=NAME answers for the one named, and
a model that unloads clears its subscribers' state."""
import subprocess
import sys
import time

import msgspec
import pytest
import zmq
import httpx2 as httpx

from process_harness import EXIT_TIMEOUT_S, RPC_TIMEOUT_S
from server_harness import DEFAULT_MODEL, REPO, SERVER_BIN, TINY_MODEL, Server, generate, pb2


# vLLM's wire types, written from its definitions (the package needs a GPU stack to import).
class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list


class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


DECODER = msgspec.msgpack.Decoder(type=KVEventBatch)
END_OF_REPLAY = (-1).to_bytes(8, "big", signed=True)
POD = "test-pod-7"
SYSTEM = ("You are a careful assistant who answers questions about the history of science "
          "in short, precise sentences.")


class Subscriber:
    """A router's view: hash -> (parent hash, token ids), from the events it applied."""

    def __init__(self, context, endpoint, topic):
        self.socket = context.socket(zmq.SUB)
        self.socket.setsockopt_string(zmq.SUBSCRIBE, topic)
        self.socket.connect(endpoint)
        self.state = {}
        self.last_sequence = None
        self.counts = {"BlockStored": 0, "BlockRemoved": 0, "AllBlocksCleared": 0}
        self.block_sizes = set()
        self.loras = {}  # hash -> (lora_id, lora_name) of the stored blocks

    def apply(self, payload):
        for event in DECODER.decode(payload).events:
            self.counts[type(event).__name__] += 1
            if isinstance(event, BlockStored):
                self.block_sizes.add(event.block_size)
                for block_hash in event.block_hashes:
                    self.state[block_hash] = (event.parent_block_hash, list(event.token_ids))
                    self.loras[block_hash] = (event.lora_id, event.lora_name)
            elif isinstance(event, BlockRemoved):
                for block_hash in event.block_hashes:
                    assert block_hash in self.state, f"removed {block_hash}, never stored"
                    del self.state[block_hash]
            else:
                self.state.clear()

    def next_sequence(self):
        return 0 if self.last_sequence is None else self.last_sequence + 1

    def drain(self, replay=None, quiet_s=1.0):
        """Applies messages until none comes for quiet_s; a gap in the sequence asks `replay`
        (a DEALER socket) for what was missed, as vLLM's example subscriber does."""
        while self.socket.poll(int(quiet_s * 1000)):
            _, sequence_bytes, payload = self.socket.recv_multipart()
            sequence = int.from_bytes(sequence_bytes, "big")
            if sequence > self.next_sequence():
                assert replay is not None, f"missed batches {self.next_sequence()}..{sequence - 1}"
                self.replay(replay, self.next_sequence(), sequence)
            if sequence == self.next_sequence():
                self.apply(payload)
                self.last_sequence = sequence

    def replay(self, socket, start, until, topic=None):
        """`topic`: named in the request (a server of several models), else the default's."""
        topic_frame = [topic.encode()] if topic is not None else []
        socket.send_multipart([b"", *topic_frame, start.to_bytes(8, "big")])
        while True:
            assert socket.poll(int(RPC_TIMEOUT_S * 1000)), "the replay never ended"
            _, sequence_bytes, payload = socket.recv_multipart()
            if sequence_bytes == END_OF_REPLAY:
                break
            sequence = int.from_bytes(sequence_bytes, "big")
            if sequence < until and sequence == self.next_sequence():
                self.apply(payload)
                self.last_sequence = sequence
        assert self.next_sequence() == until, "the replay did not cover the gap"


def server_state(server, model=None):
    query = f"?model={model}" if model is not None else ""
    response = httpx.get(f"http://127.0.0.1:{server.metrics_port}/kv_events/state{query}",
                         timeout=RPC_TIMEOUT_S)
    assert response.status_code == 200
    body = response.json()
    return body["block_size"], {b["block_hash"]: (b["parent_block_hash"], b["token_ids"])
                                for b in body["blocks"]}


@pytest.fixture(scope="module")
def served():
    # A small pool (about 22 blocks of 16 tokens for this model): the questions below evict.
    with Server("--kv-events-endpoint", "tcp://127.0.0.1:*",
                "--kv-events-replay-endpoint", "tcp://127.0.0.1:*",
                "--kv-cache-memory", "8MiB", env={"POD_NAME": POD}) as server:
        match = server.wait_for_log(r"KV cache events on (\S+) \(topic '([^']+)'\), "
                                    r"replay on (\S+)")
        context = zmq.Context()
        yield server, match.group(1), match.group(2), match.group(3), context
        context.destroy(linger=0)


def ask(server, question, max_tokens=4):
    return generate(server.stub, pb2.GenerateRequest(text=f"{SYSTEM} {question}",
                                                     max_tokens=max_tokens))


def test_events_rebuild_the_servers_prefix_cache_through_sharing_and_eviction(served):
    server, endpoint, topic, _, context = served
    assert topic == f"kv@{POD}@{server.stub.GetModelInfo(pb2.GetModelInfoRequest()).name}"
    subscriber = Subscriber(context, endpoint, "kv@")
    time.sleep(0.5)  # the subscription reaches the publisher (PUB drops until it does)
    for i in range(12):
        ask(server, f"Question {i}: who first measured the speed of light, and how, in {i + 3} "
                    f"words or fewer? Mention the year {1600 + 7 * i}.")
    subscriber.drain()
    block_size, state = server_state(server)
    assert subscriber.state == state
    assert subscriber.counts["BlockStored"] > 0 and subscriber.counts["BlockRemoved"] > 0, \
        subscriber.counts
    assert subscriber.block_sizes == {block_size}
    # The first block of the shared system prompt holds its real tokens, with no parent.
    prompt = server.stub.Tokenize(pb2.TokenizeRequest(text=f"{SYSTEM} Question 11:"),
                                  timeout=RPC_TIMEOUT_S).token_ids
    firsts = [tokens for parent, tokens in state.values() if parent is None]
    assert list(prompt[:block_size]) in firsts
    for parent, tokens in state.values():
        assert len(tokens) == block_size
        assert parent is None or parent in state, "a cached block's parent is cached"


def test_a_late_subscriber_rebuilds_the_state_from_replay(served):
    server, endpoint, _, replay_endpoint, context = served
    late = Subscriber(context, endpoint, "kv@")
    replay = context.socket(zmq.DEALER)
    replay.connect(replay_endpoint)
    time.sleep(0.5)
    # New full blocks after the cached system prompt: a batch this subscriber sees live.
    ask(server, "One more, at length: who built the first telescope, in which city and year, "
                "who improved it soon after, what did Galileo see through his own, and why "
                "did the moons of Jupiter matter so much to the debate about the heavens?")
    late.drain(replay=replay)
    assert late.last_sequence is not None and late.last_sequence > 0
    assert late.state == server_state(server)[1]


def test_a_router_that_binds_its_socket_collects_the_events():
    """A non-wildcard endpoint is connected to (vLLM's rule), so a router such as llm-d's
    precise prefix scorer binds one SUB socket that every pod publishes to."""
    context = zmq.Context()
    try:
        router = context.socket(zmq.SUB)
        router.setsockopt_string(zmq.SUBSCRIBE, "")
        port = router.bind_to_random_port("tcp://127.0.0.1")
        with Server("--kv-events-endpoint", f"tcp://127.0.0.1:{port}",
                    "--kv-events-topic", "kv@pod-a@model") as server:
            # PUB drops a batch until the router's subscription has reached it, which on a
            # loaded machine can take seconds: each new question stores new blocks.
            deadline = time.monotonic() + RPC_TIMEOUT_S
            asked = 0
            while not router.poll(2000):
                assert time.monotonic() < deadline, f"no batch after {asked} requests"
                ask(server, f"Say something about Kepler's law number {asked + 1}, please.")
                asked += 1
            topic, sequence, payload = router.recv_multipart()
            assert topic == b"kv@pod-a@model" and len(sequence) == 8
            stored = DECODER.decode(payload).events
            assert stored and all(isinstance(e, BlockStored) for e in stored)
    finally:
        context.destroy(linger=0)


@pytest.mark.parametrize("args,message", [
    (["--kv-events-endpoint", "nonsense"], "--kv-events-endpoint 'nonsense'"),
    (["--kv-events-replay-endpoint", "tcp://127.0.0.1:*"], "needs --kv-events-endpoint"),
    (["--kv-events-endpoint", "tcp://127.0.0.1:*", "--no-prefix-cache"],
     "drop --no-prefix-cache"),
    (["--model", f"tiny={TINY_MODEL}", "--kv-events-endpoint", "tcp://127.0.0.1:*",
      "--kv-events-topic", "kv@pod@both"], "each model publishes its KV events on its own"),
])
def test_bad_event_flags_fail_fast_with_a_message(args, message):
    result = subprocess.run([str(SERVER_BIN), "--model", str(DEFAULT_MODEL), "--port", "0",
                             "--metrics-port", "-1", *args], capture_output=True, text=True,
                            timeout=EXIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert result.returncode != 0
    assert message in result.stderr + result.stdout


def test_blocks_an_adapter_computed_carry_its_name(tmp_path):
    """--lora: BlockStored says which adapter computed each block (vLLM's lora_name, and its
    deprecated lora_id: the adapter's 1-based place among the flags); the base model's say
    none."""
    sys.path.insert(0, str(REPO / "tests" / "reference"))
    from make_lora_adapter import write_adapter

    adapter = tmp_path / "a.gguf"
    write_adapter(str(DEFAULT_MODEL), str(adapter), rank=4, seed=5)
    with Server("--kv-events-endpoint", "tcp://127.0.0.1:*", "--lora", f"lora-a={adapter}",
                env={"POD_NAME": POD}) as server:
        match = server.wait_for_log(r"KV cache events on (\S+) \(topic '([^']+)'\)")
        context = zmq.Context()
        try:
            subscriber = Subscriber(context, match.group(1), match.group(2))
            time.sleep(0.5)  # the subscription reaches the publisher
            prompts = {"lora-a": f"{SYSTEM} Who was Lise Meitner?", "": f"{SYSTEM} Who was Tycho?"}
            for model, text in prompts.items():
                generate(server.stub, pb2.GenerateRequest(text=text, max_tokens=2, model=model))
            subscriber.drain()
        finally:
            context.destroy(linger=0)
    assert set(subscriber.loras.values()) == {(1, "lora-a"), (None, None)}


def test_each_model_publishes_on_its_own_topic_and_an_unload_clears_it():
    tiny_text = "Once upon a time, there was a little girl named Lily. She loved to play " * 3
    with Server("--model", f"tiny={TINY_MODEL}", "--model-idle-timeout", "8",
                "--kv-events-endpoint", "tcp://127.0.0.1:*",
                "--kv-events-replay-endpoint", "tcp://127.0.0.1:*",
                model=DEFAULT_MODEL, env={"POD_NAME": POD}) as server:
        match = server.wait_for_log(r"KV cache events on (\S+) \(topics '([^']+)', '([^']+)'\), "
                                    r"replay on (\S+)")
        endpoint, default_topic, tiny_topic, replay_endpoint = match.groups()
        assert (default_topic, tiny_topic) == (f"kv@{POD}@{DEFAULT_MODEL.stem}", f"kv@{POD}@tiny")
        context = zmq.Context()
        try:
            # Each sees only its model's batches, numbered from 0 without a gap (drain asserts
            # it): the default model's come first, so one count for both would fail here.
            default = Subscriber(context, endpoint, default_topic)
            tiny = Subscriber(context, endpoint, tiny_topic)
            time.sleep(0.5)  # the subscriptions reach the publisher
            ask(server, "Who first measured the speed of light, and how?")
            generate(server.stub, pb2.GenerateRequest(text=tiny_text, max_tokens=2, model="tiny"))
            default.drain()
            tiny.drain()
            assert default.state and tiny.state
            assert default.state == server_state(server)[1]
            assert default.state == server_state(server, DEFAULT_MODEL.stem)[1]
            assert tiny.state == server_state(server, "tiny")[1]
            assert not set(default.state) & set(tiny.state)
            # A late subscriber of tiny's topic replays its batches by naming the topic.
            late = Subscriber(context, endpoint, tiny_topic)
            replay = context.socket(zmq.DEALER)
            replay.connect(replay_endpoint)
            late.replay(replay, 0, tiny.next_sequence(), topic=tiny_topic)
            assert late.state == tiny.state
            # A topic the server does not publish replays nothing; a model it does not serve
            # has no state.
            replay.send_multipart([b"", b"kv@nobody@nothing", (0).to_bytes(8, "big")])
            assert replay.poll(int(RPC_TIMEOUT_S * 1000))
            assert replay.recv_multipart()[1] == END_OF_REPLAY
            response = httpx.get(f"http://127.0.0.1:{server.metrics_port}/kv_events/state"
                                 "?model=nothing", timeout=RPC_TIMEOUT_S)
            assert "error" in response.json() and "blocks" not in response.json()
            # Both unload 8 s after their last request: each pool is gone, and the subscribers
            # of each topic hear so.
            deadline = time.monotonic() + 60
            for subscriber in (default, tiny):
                while subscriber.counts["AllBlocksCleared"] == 0:
                    assert time.monotonic() < deadline, "an unload was never published"
                    subscriber.drain(quiet_s=0.5)
                assert subscriber.state == {}
            assert server_state(server) == server_state(server, "tiny") == (16, {})
        finally:
            context.destroy(linger=0)
