"""A dozen plain questions to the model behind a running gateway (scripts/serve), asked with the
official `openai` client at temperature 0 and scored by the keywords a right answer holds; then
single-stream decode tokens/s, timed between the first and last streamed tokens of one long
answer. docs/benchmarks.md ("The default model") has the numbers and the commands:

  scripts/serve                                          # in another shell
  .venv/bin/python bench/default_model/questions.py
"""
import argparse
import re
import statistics
import time

from openai import OpenAI

# (question, keyword patterns): each pattern found (case-insensitive) is a share of the point.
QUESTIONS = [
    ("What is the capital of France?", [r"\bparis\b"]),
    ("What is the capital of Australia?", [r"\bcanberra\b"]),
    ("How many legs does a spider have?", [r"\b(8|eight)\b"]),
    ("What is 12 times 12?", [r"\b144\b"]),
    ('Who wrote "Romeo and Juliet"?', [r"\bshakespeare\b"]),
    ("What is the chemical symbol for gold?", [r"\bau\b"]),
    ("Which planet is known as the Red Planet?", [r"\bmars\b"]),
    ("What is the largest ocean on Earth?", [r"\bpacific\b"]),
    ("In which year did World War II end?", [r"\b1945\b"]),
    ("What language is spoken in Brazil?", [r"\bportuguese\b"]),
    ("Which gas do plants take from the air for photosynthesis?",
     [r"carbon dioxide|\bco2\b|\bco₂"]),
    ("What are the first two elements of the periodic table?", [r"\bhydrogen\b", r"\bhelium\b"]),
]
STORY = "Write a long story about a lighthouse keeper and a storm."


def score(answer, patterns):
    return sum(bool(re.search(p, answer, re.I)) for p in patterns) / len(patterns)


def ask_all(client, model, max_tokens):
    total = 0.0
    print("| question | score | answer |\n|---|---|---|")
    for question, patterns in QUESTIONS:
        answer = client.chat.completions.create(
            model=model, max_tokens=max_tokens, temperature=0,
            messages=[{"role": "user", "content": question}]).choices[0].message.content or ""
        points = score(answer, patterns)
        total += points
        shown = " ".join(answer.split())
        shown = shown if len(shown) <= 90 else shown[:87] + "..."
        print(f"| {question} | {points:g} | {shown.replace('|', '/')} |")
    print(f"\n{model}: {total:g} / {len(QUESTIONS)}")


def decode_rate(client, model, tokens):
    """Tokens/s after the first token of one streamed answer, and its completion tokens."""
    stream = client.chat.completions.create(
        model=model, max_tokens=tokens, temperature=0, stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": STORY}])
    first = last = None
    completion_tokens = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            last = time.perf_counter()
            first = first or last
        if chunk.usage:
            completion_tokens = chunk.usage.completion_tokens
    return (completion_tokens - 1) / (last - first), completion_tokens


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--model", help="default: the first model the gateway lists")
    parser.add_argument("--max-tokens", type=int, default=48, help="per question")
    parser.add_argument("--decode-tokens", type=int, default=128)
    parser.add_argument("--decode-runs", type=int, default=3, help="0: no decode timing")
    args = parser.parse_args()
    client = OpenAI(base_url=args.base_url, api_key="unused", max_retries=0, timeout=600)
    model = args.model or client.models.list().data[0].id
    ask_all(client, model, args.max_tokens)
    if args.decode_runs:
        runs = [decode_rate(client, model, args.decode_tokens) for _ in range(args.decode_runs)]
        rates = [f"{rate:.1f}" for rate, _ in runs]
        print(f"decode: median {statistics.median(r for r, _ in runs):.1f} tokens/s "
              f"(runs: {', '.join(rates)}; {runs[0][1]} tokens each)")


if __name__ == "__main__":
    main()
