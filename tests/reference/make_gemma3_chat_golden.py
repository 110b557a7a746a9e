"""Writes tests/data/logits/gemma-3-270m-q4_k_m.chat.json: 16 chats with Gemma 3 270M Q4_K_M,
each rendered with Gemma's chat template (tests/data/chat_templates/gemma.jinja, by jinja2 as
Hugging Face's apply_chat_template runs it: trim_blocks, lstrip_blocks), tokenized by llama.cpp
with special tokens parsed, and llama.cpp's greedy reply fed one token at a time (up to 32
tokens, ending at an end-of-generation token), with llama.cpp's top-2 logit gap at each step
and the reply's text after each token, so that a reply that differs can be placed. The chats
share a long first turn, so a server with prefix caching serves most of each prompt from the
cache. tests/e2e/test_gemma3_chat.py sends them through tokenmill-server and the gateway.

Run from the repository root (needs tests/reference/requirements.txt):
  .venv/bin/python tests/reference/make_gemma3_chat_golden.py
"""
import json
import os
import sys

import jinja2
import llama_cpp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_logits_golden import MODELS, PROMPTS  # noqa: E402
from make_requantized_golden import Llama  # noqa: E402  (vec_dot path, no extra buffers)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = "gemma-3-270m-q4_k_m.gguf"
TEMPLATE = os.path.join(ROOT, "tests", "data", "chat_templates", "gemma.jinja")
MAX_TOKENS = 32
SHARED_TURN = ("You are helping a child learn about the world. Answer in one or two short, "
               "friendly sentences, using simple words, and never use lists or headings. "
               "The child is seven years old, likes animals, space and stories, and asks many "
               "questions. Are you ready?")
QUESTIONS = PROMPTS + ["Why is the sky blue?", "What do bees make?", "How far is the Moon?",
                       "Tell me about elephants."]


def chats():
    return [[{"role": "user", "content": SHARED_TURN},
             {"role": "assistant", "content": "Yes! Ask me anything."},
             {"role": "user", "content": q}] for q in QUESTIONS]


def render(messages):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(open(TEMPLATE).read()).render(
        messages=messages, bos_token="<bos>", add_generation_prompt=True)


def main():
    llm = Llama(model_path=os.path.join(MODELS, MODEL), n_ctx=512, n_threads=1, n_batch=1,
                n_ubatch=1, logits_all=True, verbose=False, seed=0)
    eog = {llm.token_eos(), int(llm.tokenize(b"<end_of_turn>", add_bos=False, special=True)[0])}
    prompts = [llm.tokenize(render(m).encode("utf-8"), add_bos=False, special=True)
               for m in chats()]
    # The prompts' common prefix is evaluated once; each chat goes on from it (Llama.eval
    # drops the KV past n_tokens), the same KV as evaluating it again.
    shared = 0
    while all(len(p) > shared + 1 and p[shared] == prompts[0][shared] for p in prompts):
        shared += 1
    llm.reset()
    for token in prompts[0][:shared]:
        llm.eval([token])
    out = []
    for messages, prompt in zip(chats(), prompts):
        llm.n_tokens = shared
        for token in prompt[shared:]:
            llm.eval([token])
        reply, gaps = [], []
        while len(reply) < MAX_TOKENS:
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            top2 = np.sort(row)[-2:]
            gaps.append(float(top2[1] - top2[0]))
            token = int(np.argmax(row))
            if token in eog:
                break
            reply.append(token)
            llm.eval([token])
        text_after = [llm.detokenize(reply[:i + 1]).decode("utf-8", errors="replace")
                      for i in range(len(reply))]
        out.append({"messages": messages, "prompt_tokens": prompt, "reply_tokens": reply,
                    "reply": text_after[-1] if reply else "", "text_after": text_after,
                    "finished": len(reply) < MAX_TOKENS, "top2_gaps": gaps,
                    "min_top2_gap": min(gaps)})
        print(repr(out[-1]["reply"]), f"gap {min(gaps):.3f}", flush=True)
    golden = {"model": MODEL, "template": "tests/data/chat_templates/gemma.jinja",
              "llama_cpp_python_version": llama_cpp.__version__,
              "llama_cpp_run": "n_threads=1, n_batch=n_ubatch=1, vec_dot path "
                               "(make_requantized_golden.py)",
              "max_tokens": MAX_TOKENS, "chats": out}
    path = os.path.join(ROOT, "tests", "data", "logits", "gemma-3-270m-q4_k_m.chat.json")
    with open(path, "w") as f:
        json.dump(golden, f, indent=0)
    print("wrote", path)


if __name__ == "__main__":
    main()
