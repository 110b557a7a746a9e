"""Writes tests/data/moe/routing.json: llama.cpp's routing of every token of the tiny
mixture-of-experts models (tests/reference/tiny_families/: qwen3moe with tied router rows,
qwen2moe, mixtral), captured from its graph through llama-cpp-python's eval callback while the
prompts run one token at a time: each layer's router logits (ffn_moe_logits), the experts it
chose (ffn_moe_topk) and their final weights (ffn_moe_weights_norm where the family
renormalizes, else ffn_moe_weights), and how many of the choices ended on a tie.
tests/model/moe_routing_test.cc routes the same logits with RouteToken and must find the same
experts in the same order and the same weights bit for bit.

Run from the repository root (needs tests/reference/requirements.txt):
  .venv/bin/python tests/reference/make_moe_routing_golden.py
"""
import ctypes
import json
import os
import sys
import tempfile

import numpy as np
import llama_cpp
from llama_cpp import Llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_families  # noqa: E402
from llama_cpp_dump import GgmlTensor, tensor_to_numpy  # noqa: E402
from tiny_families.common import CONTEXT, PROMPTS  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "data", "moe", "routing.json")
GGML_TYPE_I32 = 26
# name: whether the family renormalizes the chosen weights (as its file in model/arch says).
MODELS = {"qwen3moe": True, "qwen2moe": False, "mixtral": True}


def i32_tensor(t):
    """An I32 tensor of shape [ne0, ne1] (possibly a view with strides) as a numpy array."""
    ne0, ne1 = t.ne[0], t.ne[1]
    rows = []
    for r in range(ne1):
        row = (ctypes.c_int32 * ne0).from_address(t.data + r * t.nb[1])
        rows.append(list(row))
    return np.array(rows, dtype=np.int32)


def capture(name, normalize):
    module = tiny_families.family(name)
    seen = {}

    @llama_cpp.ggml_backend_sched_eval_callback
    def callback(t_ptr, ask, _user):
        if ask:
            return True
        t = GgmlTensor.from_address(t_ptr)
        tensor_name = t.name.decode()
        base = tensor_name.rsplit("-", 1)[0]
        if base == "ffn_moe_topk" and t.type == GGML_TYPE_I32:
            seen[tensor_name] = i32_tensor(t)
        elif base in ("ffn_moe_logits", "ffn_moe_weights", "ffn_moe_weights_norm"):
            seen[tensor_name] = tensor_to_numpy(t)
        return True

    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name + ".gguf")
        module.write(path)
        llm = Llama(model_path=path, n_ctx=CONTEXT, n_threads=1, n_batch=1, n_ubatch=1,
                    logits_all=True, verbose=False, seed=0)
        params = llm.context_params
        params.cb_eval = callback
        params.cb_eval_user_data = None
        llm._ctx = llama_cpp._internals.LlamaContext(model=llm._model, params=params,
                                                     verbose=False)
        llm._batch = llama_cpp._internals.LlamaBatch(n_tokens=1, embd=0, n_seq_max=1,
                                                     verbose=False)
        for prompt in getattr(module, "PROMPTS", PROMPTS):
            llm.reset()
            for token in prompt:
                seen.clear()
                llm.eval([token])
                for layer in range(module.N_LAYER):
                    logits = seen[f"ffn_moe_logits-{layer}"].reshape(-1)
                    experts = seen[f"ffn_moe_topk-{layer}"].reshape(-1)
                    weights_name = "ffn_moe_weights_norm" if normalize else "ffn_moe_weights"
                    weights = seen[f"{weights_name}-{layer}"].reshape(-1)
                    assert len(experts) == module.N_USED and len(weights) == module.N_USED
                    cases.append({"logits": [float(v) for v in logits],
                                  "experts": [int(e) for e in experts],
                                  "weights": [float(v) for v in weights]})
    return {"n_expert": module.N_EXPERT, "n_used": module.N_USED, "normalize": normalize,
            "cases": cases}


def ties(model):
    """How many cases choose between equal logits at the edge of the top k."""
    n = 0
    for case in model["cases"]:
        ordered = sorted(case["logits"], reverse=True)
        if ordered[model["n_used"] - 1] == ordered[model["n_used"]]:
            n += 1
    return n


def main():
    golden = {"llama_cpp_python_version": llama_cpp.__version__,
              "note": "per model, one case per (token, layer): llama.cpp's router logits, "
                      "chosen experts in order and their final weights",
              "models": {}}
    for name, normalize in MODELS.items():
        model = capture(name, normalize)
        model["ties_at_the_edge"] = ties(model)
        golden["models"][name] = model
        print(f"{name}: {len(model['cases'])} cases, {model['ties_at_the_edge']} end on a tie",
              flush=True)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(golden, f, separators=(",", ":"))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
