"""phi3 whose configured context (CONTEXT) does not exceed its original one: LongRoPE's short
factors, whatever a sequence's length (llama.cpp's get_rope_factors)."""
from . import common, phi3

ARCH = phi3.ARCH


def write(path):
    phi3.write(path, original_context=common.CONTEXT)
