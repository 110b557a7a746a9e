"""Outputs drawn from tokenmill's grammars satisfy independent validators: every JSON Schema
of tests/data/grammar (corpus.json and sample_schemas.json) with the jsonschema package, every
regex of the corpus with Python's re.fullmatch (grammar_sample_tool draws them)."""
import json
import os
import pathlib
import re
import subprocess

import jsonschema
import pytest

DATA = pathlib.Path(os.environ["TOKENMILL_TEST_DATA_DIR"]) / "grammar"
TOOL = pathlib.Path(os.environ["TOKENMILL_BIN_DIR"]) / "grammar_sample_tool"
SAMPLES = 40


def cases(kind):
    corpus = json.loads((DATA / "corpus.json").read_text())
    out = [(c["name"], c["text"]) for c in corpus if c["kind"] == kind]
    if kind == "json_schema":
        extra = json.loads((DATA / "sample_schemas.json").read_text())
        out += [(name, json.dumps(schema)) for name, schema in extra.items()]
    return out


def without_nullable(schema):
    """OpenAPI's `nullable: true` (which jsonschema does not know) as JSON Schema: the schema
    or null."""
    if isinstance(schema, list):
        return [without_nullable(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: without_nullable(v) for k, v in schema.items() if k != "nullable"}
    if schema.get("nullable") is True:
        return {"anyOf": [out, {"type": "null"}]}
    return out


def draw(kind, text, seed):
    run = subprocess.run([TOOL, kind, str(SAMPLES), str(seed)], input=text.encode(),
                         capture_output=True, check=True)
    outputs = [json.loads(line) for line in run.stdout.decode().splitlines()]
    assert len(outputs) >= SAMPLES // 2, run.stderr.decode()
    return outputs


@pytest.mark.parametrize("name,text", cases("json_schema"))
def test_json_schema_outputs_validate(name, text):
    schema = without_nullable(json.loads(text))
    validator = jsonschema.validators.validator_for(schema)(schema)
    for seed in (1, 2):
        for output in draw("json_schema", text, seed):
            instance = json.loads(output)
            errors = [e.message for e in validator.iter_errors(instance)]
            assert not errors, f"{name}: {output!r}: {errors}"


@pytest.mark.parametrize("name,text", cases("regex"))
def test_regex_outputs_fullmatch(name, text):
    pattern = re.compile(text)
    for output in draw("regex", text, 3):
        assert pattern.fullmatch(output), f"{name}: {output!r}"
