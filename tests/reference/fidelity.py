"""How far tokenmill's logits are from llama.cpp's, beside how far llama.cpp's own AVX2 and
AVX-512 builds are from each other: issue 36's fidelity policy (docs/fidelity.md).

Every passage of tests/data/fidelity/corpus.json is cut to --tokens tokens (llama.cpp's
tokenizer, BOS first) and teacher-forced through:
  llama.cpp A    the AVX2 build llama-cpp-python carries in .venv (the goldens' reference),
  llama.cpp B    a build with AVX-512 (--llama-b: the folder holding its libllama.so),
  tokenmill      build/bin/prompt_logits, the server's weight layout and prefill path, once per
                 ISA this CPU runs (--file-layout: also with the weights as in the GGUF),
each a whole passage as one prompt (llama.cpp: one batch with every row's logits; tokenmill:
chunks of --chunk tokens). Per pair of engines over all positions: the mean KL divergence of
their next-token distributions, the 99th percentile of |logit difference| over every
(position, vocabulary entry), and how often their top-1 tokens agree. The policy: tokenmill's
distance from A is within B's distance from A (or a stated floor where A and B agree exactly).

  .venv/bin/python tests/reference/fidelity.py --llama-b DIR [--tokens 96] [MODEL.gguf ...]
      [--llama-mode prefill|decode] [--file-layout] [--json OUT.json]

(not a test: it needs a second llama.cpp build, see docs/fidelity.md for the commands.)
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

MODE = ["prefill"]  # llama.cpp's: set once from the command line, read by run_llama
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def llama_worker(mode, model, tokens_in, logits_out, tokenize_text):
    """Runs in a subprocess whose LLAMA_CPP_LIB_PATH picks the llama.cpp build."""
    from llama_cpp import Llama

    llm = Llama(model_path=model, n_ctx=2048, n_batch=2048, n_ubatch=2048, n_threads=2,
                logits_all=True, verbose=False)
    if tokenize_text is not None:
        text = json.load(open(tokenize_text))
        tokens = llm.tokenize(text["text"].encode(), add_bos=True, special=False)
        tokens = tokens[: text["n"]]
        json.dump(tokens, open(tokens_in, "w"))
    tokens = json.load(open(tokens_in))
    if mode == "prefill":
        llm.eval(tokens)
    else:  # one token a step, as the goldens were made
        for t in tokens:
            llm.eval([t])
    np.asarray(llm.scores[: len(tokens)], dtype=np.float32).tofile(logits_out)


def run_llama(lib_dir, model, tokens_path, out, text_path=None):
    env = dict(os.environ)
    if lib_dir:
        env["LLAMA_CPP_LIB_PATH"] = lib_dir
    args = [sys.executable, __file__, "--worker", MODE[0], model, tokens_path, out]
    if text_path:
        args.append(text_path)
    subprocess.run(args, env=env, check=True)


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def distance(a, b):
    """Mean KL(a || b) per position, the 99th percentile of |a - b|, top-1 agreement."""
    la, lb = log_softmax(a), log_softmax(b)
    kl = (np.exp(la) * (la - lb)).sum(axis=-1)
    return {"kl": float(kl.mean()), "p99": float(np.percentile(np.abs(a - b), 99)),
            "top1": float((a.argmax(-1) == b.argmax(-1)).mean()),
            "max": float(np.abs(a - b).max())}


def isas():
    flags = open("/proc/cpuinfo").read()
    out = ["avx2"] if " avx2 " in flags else []
    if " avx512_vnni " in flags and " avx512bw " in flags:
        out.append("avx512vnni")
    return out


def measure(model, passages, args):
    engines = {}
    with tempfile.TemporaryDirectory() as tmp:
        rows = {}
        for i, text in enumerate(passages):
            text_path = os.path.join(tmp, f"text{i}.json")
            json.dump({"text": text, "n": args.tokens}, open(text_path, "w"))
            tokens_path = os.path.join(tmp, f"tokens{i}.json")
            out = {}
            out["llama.cpp A (AVX2)"] = os.path.join(tmp, f"a{i}.f32")
            run_llama(None, model, tokens_path, out["llama.cpp A (AVX2)"], text_path)
            out["llama.cpp B (AVX-512)"] = os.path.join(tmp, f"b{i}.f32")
            run_llama(args.llama_b, model, tokens_path, out["llama.cpp B (AVX-512)"])
            tokens = json.load(open(tokens_path))
            layouts = ["server", "file"] if args.file_layout else ["server"]
            for isa, layout in ((isa, layout) for isa in isas() for layout in layouts):
                name = f"tokenmill {isa}" + (" (file layout)" if layout == "file" else "")
                out[name] = os.path.join(tmp, f"{isa}-{layout}{i}.f32")
                subprocess.run([args.prompt_logits, model, out[name], isa, layout,
                                str(args.chunk)] + [str(t) for t in tokens], check=True)
            for name, path in out.items():
                logits = np.fromfile(path, dtype=np.float32).reshape(len(tokens), -1)
                rows.setdefault(name, []).append(logits)
        for name, parts in rows.items():
            engines[name] = np.concatenate(parts)
    reference = engines.pop("llama.cpp A (AVX2)")
    return {name: distance(reference, logits) for name, logits in engines.items()}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        llama_worker(*sys.argv[2:6], sys.argv[6] if len(sys.argv) > 6 else None)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--llama-b", required=True, help="folder of the AVX-512 libllama.so")
    parser.add_argument("--prompt-logits", default=os.path.join(ROOT, "build", "bin",
                                                                "prompt_logits"))
    parser.add_argument("--tokens", type=int, default=96, help="tokens of each passage")
    parser.add_argument("--chunk", type=int, default=512, help="tokenmill's prefill chunk")
    parser.add_argument("--llama-mode", choices=["prefill", "decode"], default="prefill",
                        help="llama.cpp given each passage as one batch, or a token a step")
    parser.add_argument("--file-layout", action="store_true",
                        help="tokenmill's weights as in the GGUF too (the kernels before row groups)")
    parser.add_argument("--json", help="write the table's numbers here too")
    args = parser.parse_args()
    MODE[0] = args.llama_mode
    models = args.models or sorted(
        [os.path.join(ROOT, "models", m) for m in ("SmolLM2-135M-Instruct.Q4_1.gguf",
                                                   "gemma-3-270m-q4_k_m.gguf")]
        + [m for m in glob.glob(os.path.join(ROOT, "models", "requantized", "*.gguf"))])
    passages = json.load(open(os.path.join(ROOT, "tests", "data", "fidelity",
                                           "corpus.json")))["passages"]
    results = {}
    print("| model | against llama.cpp A (AVX2) | mean KL | p99 abs | top-1 agree | max abs |"
          " within B's |")
    print("|---|---|---|---|---|---|---|")
    for model in models:
        stem = os.path.basename(model).removesuffix(".gguf")
        table = measure(model, passages, args)
        results[stem] = table
        bound = table["llama.cpp B (AVX-512)"]
        for name, d in table.items():
            within = ""
            if name.startswith("tokenmill"):
                ok = d["kl"] <= bound["kl"] and d["p99"] <= bound["p99"]
                within = "yes" if ok else "**no**"
            print(f"| {stem} | {name} | {d['kl']:.3g} | {d['p99']:.3g} | {d['top1']:.3f} |"
                  f" {d['max']:.3g} | {within} |", flush=True)
    if args.json:
        json.dump(results, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
