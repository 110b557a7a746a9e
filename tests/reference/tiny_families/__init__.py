"""Tiny random GGUFs of each model family, one module per family or variant (see
make_tiny_family_golden.py for how to add one). FAMILIES names every module but common and the
encoders, which have no logits to continue a prompt from (ENCODERS: tests/e2e/test_embeddings.py
checks their embeddings against llama.cpp's)."""
import importlib
import os
import pkgutil

ENCODERS = ("bert", "nomic_bert")
FAMILIES = sorted(m.name for m in pkgutil.iter_modules([os.path.dirname(__file__)])
                  if m.name != "common" and m.name not in ENCODERS)


def family(name):
    """The module of family `name`: its ARCH, PROMPTS and write(path)."""
    return importlib.import_module(f"{__name__}.{name}")
