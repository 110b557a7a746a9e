"""Greedy continuations of the golden prompts with f16 and int8 KV caches, compared.

For each prompt of tests/data/logits/<model>.json, `tokenmill generate` continues the
prompt's token ids greedily (as many tokens as llama.cpp's golden continuation, ignoring
end-of-sequence) once per KV type; prints per prompt how many leading tokens agree
between the KV types and with llama.cpp's continuation, then totals (one JSON object).

  .venv/bin/python bench/kv/greedy_golden.py --build build --threads 2
"""
import argparse
import json
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]


def common_prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def generate(binary, model, prompt, max_tokens, kv_type, threads):
    out = subprocess.run(
        [str(binary), "generate", "--model", str(model), "--prompt-tokens",
         ",".join(map(str, prompt)), "--max-tokens", str(max_tokens), "--ignore-eos", "--json",
         "--kv-type", kv_type, "--threads", str(threads)],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["tokens"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--model", default="SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--kv-types", default="f16,int8")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    golden = json.loads((ROOT / "tests/data/logits" / (pathlib.Path(a.model).stem + ".json"))
                        .read_text())
    binary = ROOT / a.build / "bin/tokenmill"
    model = ROOT / "models" / a.model
    base, other = a.kv_types.split(",")
    rows = []
    for i, prompt in enumerate(golden["prompts"]):
        n = len(prompt["continuation"])
        ours = {t: generate(binary, model, prompt["prompt_tokens"], n, t, a.threads)
                for t in (base, other)}
        row = {"prompt": i, "tokens": n,
               f"{base}_vs_{other}_prefix": common_prefix(ours[base], ours[other]),
               f"{base}_vs_llama_cpp_prefix": common_prefix(ours[base], prompt["continuation"]),
               f"{other}_vs_llama_cpp_prefix": common_prefix(ours[other], prompt["continuation"]),
               f"{base}_{other}_identical": ours[base] == ours[other]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    key = f"{base}_{other}_identical"
    print(json.dumps({"prompts": len(rows), key: sum(r[key] for r in rows),
                      "tokens": sum(r["tokens"] for r in rows),
                      f"{base}_vs_{other}_prefix_tokens":
                          sum(r[f"{base}_vs_{other}_prefix"] for r in rows),
                      f"{base}_vs_llama_cpp_prefix_tokens":
                          sum(r[f"{base}_vs_llama_cpp_prefix"] for r in rows),
                      f"{other}_vs_llama_cpp_prefix_tokens":
                          sum(r[f"{other}_vs_llama_cpp_prefix"] for r in rows)}))


if __name__ == "__main__":
    main()
