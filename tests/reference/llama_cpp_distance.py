"""Max |ours - llama.cpp| over llama.cpp's top-5 logits at every position of every golden
prompt + continuation (tests/data/logits/), tokenmill fed the same tokens one at a time by
build/bin/forward_dump (a debugging aid, not a test).

  .venv/bin/python tests/reference/llama_cpp_distance.py [build/bin/forward_dump]
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def main():
    dump = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "bin", "forward_dump")
    for stem in ["SmolLM2-135M-Instruct.Q4_1", "stories260K"]:
        with open(os.path.join(ROOT, "tests", "data", "logits", stem + ".json")) as f:
            golden = json.load(f)
        worst = 0.0
        for p in golden["prompts"]:
            tokens = p["prompt_tokens"] + p["continuation"]
            with tempfile.TemporaryDirectory() as out:
                subprocess.run([dump, os.path.join(ROOT, "models", golden["model"]), out]
                               + [str(t) for t in tokens], check=True)
                logits = np.fromfile(os.path.join(out, "logits.f32"), dtype=np.float32)
            logits = logits.reshape(len(tokens), -1)
            for i, top in enumerate(p["llama_cpp_top"][: len(tokens)]):
                diff = np.abs(logits[i, top["ids"]] - np.array(top["values"], dtype=np.float32))
                worst = max(worst, float(diff.max()))
        print(f"{stem}: max |ours - llama.cpp| over top-5 logits, all positions: {worst:.4g}")


if __name__ == "__main__":
    main()
