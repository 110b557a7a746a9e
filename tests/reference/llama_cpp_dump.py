"""Dumps llama.cpp's intermediate tensors (attn_norm-0, Qcur-0, kq-0, kqv_out-0, ffn_out-0,
result_norm, ...) for one prompt fed token by token, through the eval callback of
llama-cpp-python's low-level API. A debugging aid for matching tokenmill's forward pass to
llama.cpp op by op; not a test.

  .venv/bin/python tests/reference/llama_cpp_dump.py MODEL.gguf OUT.npz "prompt text" [STEPS]

OUT.npz holds, for each tensor name seen at token i, an array "<name>@<i>" (f32, ggml's
ne order reversed, i.e. numpy row-major), plus "tokens".
"""
import ctypes
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

GGML_MAX_DIMS = 4
GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1


class GgmlTensor(ctypes.Structure):
    # The head of ggml.h's struct ggml_tensor, up to its name.
    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * GGML_MAX_DIMS),
        ("nb", ctypes.c_size_t * GGML_MAX_DIMS),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
    ]


def tensor_to_numpy(t):
    ne = list(t.ne)
    nb = list(t.nb)
    if t.type == GGML_TYPE_F32:
        dtype, size = np.float32, 4
    elif t.type == GGML_TYPE_F16:
        dtype, size = np.float16, 2
    else:
        return None
    span = sum((n - 1) * s for n, s in zip(ne, nb)) + size
    raw = (ctypes.c_uint8 * span).from_address(t.data)
    base = np.frombuffer(raw, dtype=np.uint8)
    arr = np.lib.stride_tricks.as_strided(
        base.view(dtype) if span % size == 0 else base[: span - span % size].view(dtype),
        shape=tuple(reversed(ne)), strides=tuple(reversed(nb)))
    return np.array(arr, dtype=np.float32)


def dump(model_path, text, steps=0):
    tensors = {}
    state = {"token": 0}

    @llama_cpp.ggml_backend_sched_eval_callback
    def callback(t_ptr, ask, _user):
        if ask:
            return True
        t = GgmlTensor.from_address(t_ptr)
        arr = tensor_to_numpy(t)
        if arr is not None:
            # A name computed twice in one step (Qcur, Kcur: before and after RoPE): the
            # first is kept as "<name>#0", the last as "<name>".
            key = f"{t.name.decode()}@{state['token']}"
            if key in tensors:
                tensors.setdefault(key.replace("@", "#0@"), tensors[key])
            tensors[key] = arr
        return True

    llm = Llama(model_path=model_path, n_ctx=512, n_threads=1, n_batch=1, n_ubatch=1,
                logits_all=True, verbose=False, seed=0)
    # The callback is read when the context is made: rebuild it with the callback set.
    params = llm.context_params
    params.cb_eval = callback
    params.cb_eval_user_data = None
    llm._ctx.close() if hasattr(llm._ctx, "close") else None
    llm._ctx = llama_cpp._internals.LlamaContext(model=llm._model, params=params, verbose=False)
    llm._batch = llama_cpp._internals.LlamaBatch(n_tokens=1, embd=0, n_seq_max=1, verbose=False)
    tokens = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    llm.reset()
    for token in tokens:
        llm.eval([token])
        state["token"] += 1
    generated = []
    for _ in range(steps):
        generated.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
        llm.eval([generated[-1]])
        state["token"] += 1
    tensors["tokens"] = np.array(tokens + generated, dtype=np.int32)
    tensors["logits"] = np.array(llm.scores[: llm.n_tokens], dtype=np.float32)
    return tensors


def main():
    model_path, out, text = sys.argv[1:4]
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    tensors = dump(model_path, text, steps)
    np.savez(out, **tensors)
    names = sorted({k.split("@")[0] for k in tensors})
    print(len(tensors), "arrays:", " ".join(names))


if __name__ == "__main__":
    main()
