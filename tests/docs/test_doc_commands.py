"""Every command in README.md and docs/*.md against the binaries (doc_commands.py): the flags
of tokenmill's programs, scripts and benchmarks exist in their --help, docs/api.md's flag
tables list exactly the servers' flags, and the examples that talk to a running server (curl,
the openai, anthropic and grpcio Python snippets, the stub generation) run against a real
tokenmill-server and tokenmill-gateway started as docs/api.md starts them, on free ports (the
server on the tests' SmolLM2 in place of scripts/serve's model, under the same names).

Not run here, checked for their flags and repository paths only: scripts/serve and
scripts/test (they build), docker, podman and kubectl (no cluster or engine here), grpcurl
(not installed), benchmarks (minutes each) and GPU steps."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from doc_commands import (BIN_DIR, DOCS, REPO, Command, check_command, doc_commands,  # noqa: E402
                          fenced_blocks, table_errors)
from gateway_harness import Gateway, backend_address  # noqa: E402
from server_harness import DEFAULT_MODEL, MODELS_DIR, SERVE_MODEL, Server  # noqa: E402

API_DOC = REPO / "docs" / "api.md"
COMMANDS = [c for doc in DOCS for c in doc_commands(doc)]
# Fences with these cannot run here: every command in them is checked for flags only.
NOT_RUNNABLE = re.compile(r"\b(kubectl|docker|podman)\b|example\.com")
RUN_TIMEOUT_S = 120


def test_the_docs_have_commands():
    programs = {Path(c.words[0]).name for c in COMMANDS}
    assert {"tokenmill-server", "tokenmill-gateway", "curl", "serve"} <= programs


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.where)
def test_flags_exist_in_the_programs_help(command):
    errors, _ = check_command(command)
    assert not errors, f"{command.where}: {command.text}\n" + "\n".join(errors)


@pytest.mark.parametrize("heading,binary", [("Flags", "tokenmill-server"),
                                            ("Gateway flags", "tokenmill-gateway")])
def test_flag_tables_list_exactly_the_programs_flags(heading, binary):
    errors = table_errors(API_DOC.read_text(), heading, binary)
    assert not errors, "\n".join(errors)


# The check bites: a made-up flag, a flag without its value, a value outside its choices,
# and a table row for a flag of the other program all fail.
BAD_DOC = """
```
build/bin/tokenmill-server --model m.gguf --no-such-flag 3
build/bin/tokenmill-server --model m.gguf --port
build/bin/tokenmill-server --model m.gguf --tool-call-parser mistral_v12
scripts/serve --max-num-seqs=4 --made-up
```
"""


def test_a_doc_with_a_made_up_flag_fails():
    errors = [e for c in doc_commands(Path("BAD.md"), BAD_DOC) for e in check_command(c)[0]]
    assert errors == [
        "tokenmill-server: --no-such-flag is not in its --help",
        "tokenmill-server: --port needs a value",
        "tokenmill-server: --tool-call-parser mistral_v12: not one of ['auto', 'deepseek_v3', "
        "'deepseek_v31', 'harmony', 'hermes', 'json', 'kimi_k2', 'llama3_json', 'mistral', "
        "'mistral_v11', 'none']",
        "scripts/serve: --made-up is not in its --help",
    ]
    table = "## Flags\n\n| flag | default | meaning |\n| --- | --- | --- |\n" \
            "| `--response-store-size` | 64MiB | the gateway's |\n"
    assert "'Flags' lists --response-store-size, which tokenmill-server --help lacks" in \
        table_errors(table, "Flags", "tokenmill-server")


def started_by_hand():
    """The server and gateway commands of docs/api.md's "by hand" fence."""
    for _, first_line, body in fenced_blocks(API_DOC.read_text()):
        if "tokenmill-gateway --backend" in body:
            commands = doc_commands(API_DOC, f"```\n{body}```\n")
            by_name = {Path(c.words[0]).name: c.words for c in commands}
            return by_name["tokenmill-server"], by_name["tokenmill-gateway"]
    raise AssertionError("docs/api.md starts no gateway by hand")


def without(words, *flags):
    """`words` past the program, less each of `flags` and its value; and those values."""
    rest, values, i = [], {}, 1
    while i < len(words):
        if words[i] in flags:
            values[words[i]] = words[i + 1]
            i += 2
        else:
            rest.append(words[i])
            i += 1
    return rest, values


@pytest.fixture(scope="module")
def served():
    server_words, gateway_words = started_by_hand()
    server_args, server_values = without(server_words, "--model", "--port")
    gateway_args, _ = without(gateway_words, "--backend", "--port")
    model = MODELS_DIR / Path(server_values["--model"]).name
    # The docs start scripts/serve's model (1.1 GB, ~10 tokens/s here). The examples check the
    # API, not the answers (tests/e2e/test_default_model.py does): the tests' model serves
    # under the documented names.
    if model == SERVE_MODEL:
        model = DEFAULT_MODEL
    with Server(*server_args, model=model) as server, \
            Gateway(backend_address(server), extra_args=gateway_args) as gateway:
        yield {"8000": gateway.port, "50051": server.port, "8002": server.metrics_port}


def on_free_ports(text, ports):
    """The documented ports replaced by the test's."""
    for documented, actual in ports.items():
        text = re.sub(rf"(127\.0\.0\.1|localhost):{documented}\b", rf"\g<1>:{actual}", text)
    return text


def runnable_fences(doc):
    """(language, line, body) of the fences of `doc` that talk to a local server."""
    for language, line, body in fenced_blocks(doc.read_text()):
        if not NOT_RUNNABLE.search(body) and re.search(r"(127\.0\.0\.1|localhost):\d", body):
            yield language, line, body


CURLS = [c for c in COMMANDS if c.words[0] == "curl" and any(
    line <= c.line < line + body.count("\n")
    for _, line, body in runnable_fences(REPO / c.doc))]
PYTHON_FENCES = [(str(doc.relative_to(REPO)), line, body) for doc in DOCS
                 for language, line, body in runnable_fences(doc) if language == "python"]


def test_the_runnable_examples_are_found():
    assert {c.doc for c in CURLS} >= {"README.md", "docs/api.md"}
    assert len(PYTHON_FENCES) >= 4  # README, grpcio, openai and anthropic in docs/api.md


@pytest.mark.parametrize("command", CURLS, ids=lambda c: c.where)
def test_curl_examples_answer_200(served, command: Command):
    text = on_free_ports(command.text, served).replace("curl ", "curl -sS -w '\\n%{http_code}' ", 1)
    result = subprocess.run(["bash", "-c", text], capture_output=True, text=True,
                            timeout=RUN_TIMEOUT_S)
    body, _, status = result.stdout.rpartition("\n")
    assert result.returncode == 0 and status == "200", f"{command.where}: {status}\n{body}"


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    """docs/api.md's stub generation, run as written in a folder beside proto/."""
    folder = tmp_path_factory.mktemp("stubs")
    (folder / "proto").symlink_to(REPO / "proto")
    protoc = next(c for c in COMMANDS if c.doc == "docs/api.md" and "grpc_tools.protoc" in c.text)
    text = re.sub(r"^python\b", sys.executable, protoc.text)
    result = subprocess.run(["bash", "-c", text],
                            cwd=folder, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert result.returncode == 0, f"{protoc.where}: {result.stderr}"
    return folder


@pytest.mark.parametrize("fence", PYTHON_FENCES, ids=lambda f: f"{f[0]}:{f[1]}")
def test_python_examples_run(served, stubs, fence):
    doc, line, body = fence
    result = subprocess.run([sys.executable, "-c", on_free_ports(body, served)], cwd=stubs,
                            capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert result.returncode == 0, f"{doc}:{line}:\n{result.stderr[-3000:]}"
    assert result.stdout.strip(), f"{doc}:{line} printed nothing"


@pytest.mark.parametrize("binary,variable", [("tokenmill-server", "TOKENMILL_API_KEY"),
                                             ("tokenmill-gateway", "TOKENMILL_GATEWAY_API_KEY")])
def test_api_key_is_in_help_and_its_value_never_is(binary, variable):
    """As docs/api.md says: a user finds the flag; the key never shows."""
    key = "sk-doc-test-key-0123456789"
    result = subprocess.run([str(BIN_DIR / binary), "--api-key", key, "--help"],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, variable: key})
    assert result.returncode == 0 and "--api-key" in result.stdout
    assert key not in result.stdout + result.stderr
