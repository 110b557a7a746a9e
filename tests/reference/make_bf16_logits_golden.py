"""Writes tests/data/logits/<model>.bf16.json: the NumPy forward pass's logits of the first
golden prompt with every weight product over bfloat16 operands (numpy_forward.py's
bf16_products), at the ids the model's golden keeps. The CUDA pass's cuBLAS path rounds
weights and activations to bf16 before each product; how far that moves the NumPy logits from
the exact ones is the error budget cuda_forward_test gives that path.

    .venv/bin/python tests/reference/make_bf16_logits_golden.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from numpy_forward import NumpyModel  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = os.environ.get("TOKENMILL_MODELS_DIR", os.path.join(ROOT, "models"))
OUT_DIR = os.path.join(ROOT, "tests", "data", "logits")
MODEL_FILES = ["stories260K.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"]


def main():
    for model_file in MODEL_FILES:
        stem = os.path.splitext(model_file)[0]
        with open(os.path.join(OUT_DIR, stem + ".json")) as f:
            prompt = json.load(f)["prompts"][0]
        logits = NumpyModel(os.path.join(MODELS, model_file), bf16_products=True).forward(
            prompt["prompt_tokens"])
        rows = [{"ids": row["ids"], "values": [round(float(v), 6) for v in logits[pos][row["ids"]]]}
                for pos, row in enumerate(prompt["numpy_logits"])]
        out = os.path.join(OUT_DIR, stem + ".bf16.json")
        with open(out, "w") as f:
            json.dump({"model": model_file, "prompt": 0,
                       "note": "NumPy logits with bf16 weights and bf16 activations at each "
                               "weight product (numpy_forward.py, bf16_products=True)",
                       "numpy_logits": rows}, f, separators=(",", ":"))
        worst = max(abs(a - b) for row, exact in zip(rows, prompt["numpy_logits"])
                    for a, b in zip(row["values"], exact["values"]))
        print("wrote", out, f"(max |bf16 - exact| {worst:.4f})")


if __name__ == "__main__":
    main()
