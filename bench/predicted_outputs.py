"""What OpenAI's Predicted Outputs (`prediction`) buy: the same greedy chat requests through
tokenmill-gateway to a tokenmill-server with --spec ngram, without and with a prediction, and
to one without speculation. The output must be the same every way; the prediction only gives
the n-gram drafter text to look up, so more drafts are accepted and fewer engine steps run.

  1. rewrite: "replace cat with dog" in a text given in the prompt; prediction: the text as
     it is (what OpenAI's guide sends: the file being edited). The prompt holds the text too,
     so prompt lookup alone finds it as well;
  2. known answer: a free answer, asked again with the first answer as the prediction (text
     that is not in the prompt: prompt lookup alone finds nothing).

Steps per output token = (completion tokens - accepted drafts) / completion tokens, from the
server's counters (tokenmill:spec_decode_num_accepted_tokens_total). Starts its own processes.

  .venv/bin/python bench/predicted_outputs.py --tokens 160
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from gateway_harness import Gateway, backend_address, model_name  # noqa: E402
from server_harness import Server  # noqa: E402

TEXT = ("The cat woke up early. The cat stretched on the warm windowsill and looked at the "
        "garden. A bird landed on the fence, and the cat watched it for a long time. Then the "
        "cat jumped down, walked to the kitchen and waited by its bowl. When breakfast came, "
        "the cat ate slowly and went back to sleep in the sun.")
REWRITE = [{"role": "system", "content": "You edit text. Output only the edited text."},
           {"role": "user", "content": "Replace every 'cat' with 'dog' in this text:\n\n" + TEXT}]
QUESTION = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
ACCEPTED = "tokenmill:spec_decode_num_accepted_tokens_total"


def run(client, model, server, messages, tokens, prediction=None):
    """(text, completion tokens, accepted draft tokens, seconds)."""
    before = server.metrics().get(ACCEPTED, 0.0) if server else 0.0
    extra = {"prediction": {"type": "content", "content": prediction}} if prediction else {}
    t0 = time.perf_counter()
    out = client.chat.completions.create(model=model, messages=messages, max_tokens=tokens,
                                         temperature=0, **extra)
    seconds = time.perf_counter() - t0
    accepted = (server.metrics().get(ACCEPTED, 0.0) - before) if server else 0.0
    return out.choices[0].message.content, out.usage.completion_tokens, accepted, seconds


def report(name, result):
    _, completion, accepted, seconds = result
    steps = (completion - accepted) / completion
    print(f"  {name:28s} {completion:4d} tokens  {accepted:4.0f} accepted  "
          f"{steps:.2f} steps/token  {completion / seconds:6.1f} tokens/s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=160)
    parser.add_argument("--spec-tokens", type=int, default=4)
    args = parser.parse_args()
    with Server("--spec", "ngram", "--spec-tokens", str(args.spec_tokens)) as spec, \
            Server() as plain, Gateway(backend_address(spec)) as g_spec, \
            Gateway(backend_address(plain)) as g_plain:
        c_spec, c_plain = g_spec.client(), g_plain.client()
        model = model_name(g_spec)
        answer = run(c_plain, model, None, QUESTION, args.tokens)[0]
        cases = [("rewrite", REWRITE, TEXT),
                 ("known answer", QUESTION, answer)]
        for name, messages, prediction in cases:
            run(c_spec, model, spec, messages, 8)  # warm: the prompt is cached alike after
            print(f"{name} (--spec ngram --spec-tokens {args.spec_tokens}):")
            none = run(c_plain, model, None, messages, args.tokens)
            lookup = run(c_spec, model, spec, messages, args.tokens)
            predicted = run(c_spec, model, spec, messages, args.tokens, prediction)
            assert none[0] == lookup[0] == predicted[0], "speculation changed the output"
            report("no speculation", (none[0], none[1], 0.0, none[3]))
            report("prompt lookup", lookup)
            report("prompt lookup + prediction", predicted)


if __name__ == "__main__":
    main()
