"""Op-by-op comparison of tokenmill's forward pass with llama.cpp's, one prompt fed token
by token (a debugging aid, not a test). Needs build/bin/forward_dump.

  .venv/bin/python tests/reference/llama_cpp_compare.py [--force] MODEL.gguf "prompt" [STEPS]

Prints, for each activation in graph order, the max |ours - llama.cpp| over the tokens and
how many tokens' rows differ in any bit. With --force every op starts from llama.cpp's
inputs (forward_dump's FORCE_DIR), so each line is that op's own difference.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_cpp_dump import dump  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OPS = ["attn_norm", "Qraw", "Kraw", "Qcur", "Kcur", "Vcur", "kqv_out", "attn_out", "ffn_inp", "ffn_norm",
       "ffn_gate", "ffn_up", "ffn_swiglu", "ffn_out", "l_out"]


def main():
    args = sys.argv[1:]
    force = "--force" in args
    args = [a for a in args if a != "--force"]
    model, text = args[:2]
    steps = int(args[2]) if len(args) > 2 else 0
    theirs = dump(model, text, steps)
    tokens = theirs["tokens"].tolist()
    n = len(tokens)
    names = {k.split("@")[0] for k in theirs if "@" in k}
    renamed = {f"{raw}-{layer}": f"{cur}-{layer}#0" for raw, cur in [("Qraw", "Qcur"), ("Kraw", "Kcur")]
               for layer in range(256)}
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as forced:
        env = dict(os.environ)
        if force:
            env["FORCE_DIR"] = forced
            for name in names:
                np.stack([theirs[f"{name}@{i}"].reshape(-1) for i in range(n)]).tofile(
                    os.path.join(forced, name + ".f32"))
            for ours_name, their_name in renamed.items():
                if their_name in names:
                    os.replace(os.path.join(forced, their_name + ".f32"),
                               os.path.join(forced, ours_name + ".f32"))
        subprocess.run([os.path.join(ROOT, "build", "bin", "forward_dump"), model, out]
                       + [str(t) for t in tokens], check=True, env=env)
        ours = {f[:-4]: np.fromfile(os.path.join(out, f), dtype=np.float32).reshape(n, -1)
                for f in os.listdir(out)}
    layers = 1 + max(int(k.rsplit("-", 1)[1]) for k in ours if k.startswith("l_out-"))
    rows = [(f"{op}-{layer}", renamed.get(f"{op}-{layer}", f"{op}-{layer}"))
            for layer in range(layers) for op in OPS]
    rows += [("result_norm", "result_norm"), ("logits", "logits")]
    first = None
    for our_name, their_name in rows:
        if our_name not in ours:
            continue
        if their_name == "logits":
            theirs_rows = theirs["logits"]
        else:
            if f"{their_name}@0" not in theirs:
                continue
            theirs_rows = np.stack([theirs[f"{their_name}@{i}"].reshape(-1) for i in range(n)])
        a = ours[our_name]
        b = theirs_rows.reshape(n, -1)
        diff = np.abs(a - b)
        differing = int(np.sum(np.any(a != b, axis=1)))
        if differing and first is None:
            first = our_name
        print(f"{our_name:16s} max|diff| {diff.max():.3e}  tokens differing {differing}/{n}")
    print("first difference:", first)


if __name__ == "__main__":
    main()
