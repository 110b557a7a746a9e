"""llama.cpp's greedy continuation of a prompt (llama-cpp-python fed one token at a time, as the
goldens are made), with its own top-2 gap at each step: the reference the e2e tests of tiny
random models hold the server's tokens to, up to llama.cpp's near-ties."""
import numpy as np
from llama_cpp import Llama


def llama_cpp_greedy(path, prompt, max_tokens, lora_path=None):
    """(tokens, top-2 gaps): llama.cpp's greedy continuation of `prompt` and its gap at each
    step; with `lora_path`, through that LoRA adapter (scale 1)."""
    kwargs = {} if lora_path is None else {"lora_path": str(lora_path)}
    llm = Llama(model_path=str(path), n_ctx=128, n_threads=1, n_batch=1, n_ubatch=1,
                logits_all=True, verbose=False, seed=0, **kwargs)
    for token in prompt:
        llm.eval([token])
    tokens, gaps = [], []
    while len(tokens) < max_tokens:
        logits = np.array(llm.scores[llm.n_tokens - 1])
        top2 = np.sort(logits)[-2:]
        gaps.append(float(top2[1] - top2[0]))
        tokens.append(int(np.argmax(logits)))
        llm.eval([tokens[-1]])
    return tokens, gaps


def llama_cpp_embedder(path, pooling_type=None, n_ctx=512):
    """llama-cpp-python on `path` in embedding mode: the model's final hidden states after its
    output norm (llama.cpp's t_embd), pooled as the file's <arch>.pooling_type says, or as
    `pooling_type` (llama_cpp.LLAMA_POOLING_TYPE_*) overrides, with the causal attention
    llama.cpp gives decoder models. A whole prompt is one batch (n_batch = n_ubatch = n_ctx:
    llama.cpp's mean pooling needs them equal)."""
    kwargs = {} if pooling_type is None else {"pooling_type": pooling_type}
    return Llama(model_path=str(path), embedding=True, n_ctx=n_ctx, n_batch=n_ctx,
                 n_ubatch=n_ctx, n_threads=2, verbose=False, seed=0, **kwargs)


def llama_cpp_embed(llm, text, normalize):
    """(vector, prompt token ids) of `text` from Llama.embed, which tokenizes as the server's
    text is (BOS where the vocabulary says so, special-token text as plain text);
    normalize: scaled to unit Euclidean length."""
    ids = llm.tokenize(text.encode("utf-8"))
    vector = np.array(llm.embed(text, normalize=normalize), dtype=np.float64)
    assert vector.shape == (llm.n_embd(),), f"pooling none? shape {vector.shape}"
    return vector, ids


def llama_cpp_embed_ids(llm, ids, normalize):
    """The pooled vector of the token ids `ids` as they are (Llama.embed's own batch and decode,
    which take text only)."""
    import llama_cpp

    llm._batch.reset()
    llm._batch.add_sequence(list(ids), 0, True)
    llm._ctx.kv_cache_clear()
    llm._ctx.decode(llm._batch)
    llm._batch.reset()
    vector = np.array(llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, 0)[:llm.n_embd()],
                      dtype=np.float64)
    llm._ctx.kv_cache_clear()
    if normalize:
        vector /= np.linalg.norm(vector)
    return vector


def llama_cpp_hidden_states(llm, ids):
    """Every token's hidden state (n_tokens rows of n_embd) of the token ids `ids` from an
    embedder made with pooling_type LLAMA_POOLING_TYPE_NONE."""
    import llama_cpp

    llm._batch.reset()
    llm._batch.add_sequence(list(ids), 0, True)
    llm._ctx.kv_cache_clear()
    llm._ctx.decode(llm._batch)
    llm._batch.reset()
    n_embd = llm.n_embd()
    pointer = llama_cpp.llama_get_embeddings(llm._ctx.ctx)
    rows = np.array(pointer[:len(ids) * n_embd], dtype=np.float64).reshape(len(ids), n_embd)
    llm._ctx.kv_cache_clear()
    return rows
