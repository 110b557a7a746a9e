"""llama.cpp's own perplexity and KL with a quantized KV cache, on tokenmill's chunks.

The counterpart of `tokenmill perplexity --kv-type T --compare-kv-type f16`: the same token
ids (`tokenmill tokenize`), cut into the same chunks of --ctx, each run from an empty cache
in one batch, the second half of each chunk scored. llama.cpp (llama-cpp-python, fed the
chunk at once with every row's logits kept) runs it once with f16 K/V and once with
--type-k/--type-v; a quantized V cache needs flash attention in llama.cpp, so both runs use
it. Prints one JSON object: each run's perplexity, the mean and max KL(f16 || quantized) of
the scored next-token distributions, and how often their top-1 tokens agree.

  .venv/bin/python bench/kv/llama_cpp_kv_perplexity.py \
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --file /usr/share/common-licenses/GPL-3 \
      --type q4_0 --threads 2
"""
import argparse
import json
import pathlib
import subprocess

import numpy as np
from llama_cpp import Llama

ROOT = pathlib.Path(__file__).resolve().parents[2]
# ggml_type numbers of the KV types compared.
GGML_TYPES = {"f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8}


def log_softmax(rows):
    rows = rows.astype(np.float64)
    rows -= rows.max(axis=-1, keepdims=True)
    return rows - np.log(np.exp(rows).sum(axis=-1, keepdims=True))


def scored_log_probs(llm, chunk):
    """Log-probabilities of the scored rows (the second half, but the last) of one chunk."""
    llm.reset()
    llm.eval(chunk)
    first = len(chunk) // 2
    return log_softmax(np.asarray(llm.scores[first:len(chunk) - 1]))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--file", required=True)
    p.add_argument("--type", default="q4_0", choices=sorted(GGML_TYPES),
                   help="the KV type (K's only, with --type-v)")
    p.add_argument("--type-v", choices=sorted(GGML_TYPES), help="V's type (-ctv), if not --type's")
    p.add_argument("--ctx", type=int, default=512)
    p.add_argument("--max-chunks", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--build", default="build")
    a = p.parse_args()
    tokens = json.loads(subprocess.run(
        [str(ROOT / a.build / "bin" / "tokenmill"), "tokenize", "--model", a.model, "--file",
         a.file], check=True, capture_output=True, text=True).stdout)
    chunks = len(tokens) // a.ctx
    if a.max_chunks > 0:
        chunks = min(chunks, a.max_chunks)

    def load(type_k, type_v):
        return Llama(model_path=a.model, n_ctx=a.ctx, n_batch=a.ctx, n_ubatch=a.ctx,
                     n_threads=a.threads, logits_all=True, flash_attn=True, verbose=False,
                     type_k=GGML_TYPES[type_k], type_v=GGML_TYPES[type_v])

    name = a.type if not a.type_v else f"{a.type}/{a.type_v}"
    base, other = load("f16", "f16"), load(a.type, a.type_v or a.type)
    nll = {"f16": 0.0, name: 0.0}
    kl_sum, kl_max, same, scored = 0.0, 0.0, 0, 0
    for c in range(chunks):
        chunk = tokens[c * a.ctx:(c + 1) * a.ctx]
        targets = np.asarray(chunk[a.ctx // 2 + 1:])
        lp_base = scored_log_probs(base, chunk)
        lp_other = scored_log_probs(other, chunk)
        rows = np.arange(len(targets))
        nll["f16"] -= lp_base[rows, targets].sum()
        nll[name] -= lp_other[rows, targets].sum()
        kl = (np.exp(lp_base) * (lp_base - lp_other)).sum(axis=-1)
        kl_sum += kl.sum()
        kl_max = max(kl_max, float(kl.max()))
        same += int((lp_base.argmax(axis=-1) == lp_other.argmax(axis=-1)).sum())
        scored += len(targets)
    print(json.dumps({
        "model": pathlib.Path(a.model).name, "file": a.file, "text_tokens": len(tokens),
        "ctx": a.ctx, "chunks": chunks, "scored_tokens": scored, "flash_attn": True,
        "perplexity": {t: float(np.exp(v / scored)) for t, v in nll.items()},
        "mean_kl": kl_sum / scored, "max_kl": kl_max, "top1_agreement": same / scored}))


if __name__ == "__main__":
    main()
