"""gemma3 with its sliding layers named one bool per layer (sliding_window_pattern as an array,
here layers 1 and 4 global) and the sliding layers' own RoPE base (rope.freq_base_swa)."""
from . import gemma3

ARCH = gemma3.ARCH


def write(path):
    gemma3.write(path, pattern=[True, False, True, True, False, True], rope_base_swa=500.0)
