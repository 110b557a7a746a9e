"""`tokenmill render-chat` end to end: the real GGUF's template and special tokens, rendered
by our binary, against Python jinja2 in Hugging Face's chat environment reading the same GGUF
with the gguf package."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
from gguf import GGUFReader

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "reference"))
from make_chat_golden import TOOLS, make_environment  # noqa: E402  (the same environment)

BIN = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tokenmill")
MODELS = os.environ["TOKENMILL_MODELS_DIR"]
TEMPLATES = pathlib.Path(os.environ["TOKENMILL_TEST_DATA_DIR"]) / "chat_templates"
DEFAULT_MODEL = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
TINY_MODEL = os.path.join(MODELS, "stories260K.gguf")

CONVERSATIONS = [
    [{"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": "Answer in French."},
     {"role": "user", "content": "Où est la gare ? «vite»"},
     {"role": "assistant", "content": "Tout droit."},
     {"role": "user", "content": "Merci\n\n"}],
]


@pytest.fixture(scope="module")
def reader():
    return GGUFReader(DEFAULT_MODEL)


def gguf_string(reader, key):
    field = reader.fields[key]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def gguf_token(reader, id_key):
    token_id = int(reader.fields[id_key].parts[-1][0])
    tokens = reader.fields["tokenizer.ggml.tokens"]
    return bytes(tokens.parts[tokens.data[token_id]]).decode("utf-8")


def render_with_jinja2(source, reader, messages, add_generation_prompt, tools=None):
    return make_environment().from_string(source).render(
        messages=messages, tools=tools, documents=None,
        add_generation_prompt=add_generation_prompt,
        bos_token=gguf_token(reader, "tokenizer.ggml.bos_token_id"),
        eos_token=gguf_token(reader, "tokenizer.ggml.eos_token_id"))


def run_cli(*args):
    return subprocess.run([BIN, "render-chat", *args], capture_output=True, check=False)


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_default_model_template_matches_jinja2(reader, messages, add_generation_prompt):
    expected = render_with_jinja2(gguf_string(reader, "tokenizer.chat_template"), reader,
                                  messages, add_generation_prompt)
    args = ["--model", DEFAULT_MODEL, "--messages", json.dumps(messages)]
    if not add_generation_prompt:
        args.append("--no-generation-prompt")
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode("utf-8") == expected


def test_template_file_override_with_tools(reader, tmp_path):
    template = TEMPLATES / "qwen2.5.jinja"
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    expected = render_with_jinja2(template.read_text(encoding="utf-8"), reader, messages, True,
                                  tools=TOOLS)
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS), encoding="utf-8")
    result = run_cli("--model", DEFAULT_MODEL, "--chat-template", str(template),
                     "--messages", json.dumps(messages), "--tools", f"@{tools_file}")
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode("utf-8") == expected


def test_model_without_template_is_an_error_not_a_guess():
    result = run_cli("--model", TINY_MODEL, "--messages", json.dumps(CONVERSATIONS[0]))
    assert result.returncode == 1
    assert result.stdout == b""
    assert "the model has no chat template" in result.stderr.decode()


def test_bad_message_names_the_message():
    messages = [{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]
    result = run_cli("--model", DEFAULT_MODEL, "--messages", json.dumps(messages))
    assert result.returncode == 1
    assert "messages[1]: unknown role 'robot'" in result.stderr.decode()
