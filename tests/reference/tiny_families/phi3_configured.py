"""phi3 served with a context below its file's: the file says 1024 tokens, past its original
256, but llama.cpp is given n_ctx 256 (N_CTX) and so takes LongRoPE's short factors: it
chooses them by the configured context, not the file's (get_rope_factors). tokenmill is given
the same context (the server's --max-model-len)."""
from . import common, phi3

ARCH = phi3.ARCH
N_CTX = common.CONTEXT


def write(path):
    phi3.write(path, original_context=N_CTX, context_length=4 * N_CTX)
