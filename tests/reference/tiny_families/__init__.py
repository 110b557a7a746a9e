"""Tiny random GGUFs of each model family, one module per family or variant (see
make_tiny_family_golden.py for how to add one). FAMILIES names every module but common."""
import importlib
import os
import pkgutil

FAMILIES = sorted(m.name for m in pkgutil.iter_modules([os.path.dirname(__file__)])
                  if m.name != "common")


def family(name):
    """The module of family `name`: its ARCH, PROMPTS and write(path)."""
    return importlib.import_module(f"{__name__}.{name}")
