"""llama.cpp's greedy continuation of a prompt (llama-cpp-python fed one token at a time, as the
goldens are made), with its own top-2 gap at each step: the reference the e2e tests of tiny
random models hold the server's tokens to, up to llama.cpp's near-ties."""
import numpy as np
from llama_cpp import Llama


def llama_cpp_greedy(path, prompt, max_tokens):
    """(tokens, top-2 gaps): llama.cpp's greedy continuation of `prompt` and its gap at each
    step."""
    llm = Llama(model_path=str(path), n_ctx=128, n_threads=1, n_batch=1, n_ubatch=1,
                logits_all=True, verbose=False, seed=0)
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
