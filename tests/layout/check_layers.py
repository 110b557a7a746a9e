#!/usr/bin/env python3
"""Checks the folders' one-way dependencies (docs/design.md, "Layout") over #include lines, and
that the CUDA pass names no model family.

Three rules, each a list of violations on failure:
1. An include from one folder into another follows the allowed order
   common <- kernels <- gguf <- {text, model} <- engine <- server, common <- cache <- scheduler
   <- engine, common <- grammar <- engine, proto <- server; kernels/cuda and model/cuda sit on
   top of kernels and model (never the other way round); the gateway (gateway/, all its
   subfolders) stands on proto and common only; cli/, bench/ and tests/ are on top.
2. Every such include outside tests/ is a declared link: each CMake target compiling the file
   (or, for a header, its folder's library) names the included folder's library in its own
   target_link_libraries, so CMake says what the code does. (A test links what it tests.)
3. No source of the CUDA pass (model/cuda/, kernels/cuda/) has a model family's name (the
   names model/arch's families register: `const ModelFamily kX{"name", ...}`) as a string
   literal: a family's graph drives the CUDA blocks as it drives the CPU's
   (model/arch/forward_blocks.h), and CUDA refuses a block, never a family by name.

  check_layers.py [REPO]     (default: the checkout this file is in)
"""
import os
import pathlib
import re
import sys

# Folder -> the folders it may include directly; what those may include comes along.
ALLOWED = {
    "common": [],
    "kernels": ["common"],
    "kernels/cuda": ["kernels"],
    "gguf": ["kernels"],
    "text": ["gguf"],
    "model": ["gguf"],
    "model/cuda": ["model", "kernels/cuda"],
    "cache": ["common"],
    "scheduler": ["cache"],
    "grammar": ["common"],
    "engine": ["model", "model/cuda", "text", "scheduler", "grammar"],
    "proto": [],
    "server": ["engine", "proto"],
    "gateway": ["proto", "common"],
    "cli": ["engine", "model/cuda"],
    "bench": ["engine", "model/cuda", "bench"],
    "tests": ["server", "gateway", "cli", "bench"],
}
LIBRARY = {
    "common": "tm_common", "kernels": "tm_kernels", "kernels/cuda": "tm_kernels_cuda",
    "gguf": "tm_gguf", "text": "tm_text", "model": "tm_model", "model/cuda": "tm_model_cuda",
    "cache": "tm_cache", "scheduler": "tm_scheduler", "grammar": "tm_grammar",
    "engine": "tm_engine", "proto": "tm_proto", "server": "tm_server",
    "gateway": "tm_gateway",
}
# Generated headers and the folder that owns them.
GENERATED = {"tokenmill/v1/": "proto"}
SOURCE_SUFFIXES = {".h", ".cc", ".cu", ".cuh", ".inc"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# Rule 3: a family's registration, and the folders that may not name one.
FAMILY = re.compile(r'\bModelFamily\s+\w+\s*\{\s*"([^"]+)"')
NO_FAMILY_NAMES = ("model/cuda", "kernels/cuda")
# C++ string literals and comments (a literal's quotes inside a comment are prose).
LITERAL_OR_COMMENT = re.compile(r'"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*.*?\*/', re.S)


def source_files(repo, names=None):
    """Files under repo (not build outputs, models or hidden folders), as repo-relative paths."""
    for root, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build")) and d != "models"]
        for f in files:
            if (names is None and pathlib.PurePath(f).suffix in SOURCE_SUFFIXES) or f == names:
                yield (pathlib.Path(root) / f).relative_to(repo)


def folder_of(path):
    """The folder (a key of ALLOWED) that a repository-relative path belongs to."""
    parts = pathlib.PurePosixPath(path).parts
    for n in (2, 1):
        key = "/".join(parts[:n])
        if len(parts) > n and key in ALLOWED:
            return key
    return None


def closure(folder):
    seen, todo = set(), [folder]
    while todo:
        f = todo.pop()
        for dep in ALLOWED[f]:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def cmake_calls(text):
    """(command, [args]) for each call in a CMakeLists.txt, comments and generator
    expressions dropped."""
    text = re.sub(r"#[^\n]*", "", text)
    for m in re.finditer(r"(\w+)\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)", text):
        args = re.sub(r"\$<[^>]*>", "", m.group(2)).split()
        yield m.group(1).lower(), args


def targets(repo):
    """Source path -> target, and target -> declared link names, over every CMakeLists.txt."""
    source_target, links = {}, {}
    for cmake in source_files(repo, "CMakeLists.txt"):
        base = cmake.parent
        for command, args in cmake_calls((repo / cmake).read_text()):
            if not args:
                continue
            name, rest = args[0], args[1:]
            if command in ("add_library", "add_executable", "target_sources",
                           "tokenmill_add_gtest", "tokenmill_add_fuzzer"):
                if command == "tokenmill_add_fuzzer":
                    rest = [name + ".cc"] + rest
                section = "SOURCES"
                for arg in rest:
                    if arg in ("SOURCES", "LIBS", "LABELS"):
                        section = arg
                    elif section == "LIBS":
                        links.setdefault(name, set()).add(arg)
                    elif section == "SOURCES" and pathlib.PurePosixPath(arg).suffix in SOURCE_SUFFIXES:
                        path = arg.replace("${PROJECT_SOURCE_DIR}/", "")
                        if not arg.startswith("${PROJECT_SOURCE_DIR}"):
                            path = (base / arg).as_posix()
                        path = path.replace("${gateway_dir}/", "gateway/")
                        source_target.setdefault(path, set()).add(name)
            elif command == "target_link_libraries":
                links.setdefault(name, set()).update(rest)
    return source_target, links


def family_names(repo):
    """The names model/arch's families register."""
    arch = repo / "model" / "arch"
    names = set()
    for path in sorted(arch.glob("*.cc")) if arch.is_dir() else []:
        names.update(FAMILY.findall(path.read_text(errors="replace")))
    return names


def check_family_names(repo):
    """Rule 3: each string literal in the CUDA pass's sources that is a family's name."""
    names = family_names(repo)
    errors = []
    for path in sorted(source_files(repo)):
        rel = path.as_posix()
        if folder_of(rel) not in NO_FAMILY_NAMES:
            continue
        text = (repo / path).read_text(errors="replace")
        for m in LITERAL_OR_COMMENT.finditer(text):
            token = m.group(0)
            if token.startswith('"') and token[1:-1] in names:
                line = text.count("\n", 0, m.start()) + 1
                errors.append(f"{rel}:{line}: names the model family {token}: the CUDA pass runs "
                              "a family's graph through its blocks and refuses a block by name")
    return errors


def check(repo):
    source_target, links = targets(repo)
    errors = check_family_names(repo)
    for path in sorted(source_files(repo)):
        rel = path.as_posix()
        folder = folder_of(rel)
        if folder is None:
            continue
        allowed = closure(folder) | {folder}
        for line, included in enumerate_includes(repo / path):
            target = next((f for prefix, f in GENERATED.items() if included.startswith(prefix)),
                          None) or folder_of(included)
            if target is None or target == folder:
                continue
            where = f"{rel}:{line}: includes {included}"
            if target not in allowed:
                errors.append(f"{where}: {folder}/ may not depend on {target}/")
                continue
            lib = LIBRARY.get(target)
            if lib is None or folder == "tests":
                continue
            owners = source_target.get(rel) or {LIBRARY.get(folder)} - {None}
            for owner in sorted(owners):
                if lib not in links.get(owner, set()):
                    errors.append(f"{where}: {owner} does not link {lib}")
    return errors


def enumerate_includes(path):
    text = path.read_text(errors="replace")
    for m in INCLUDE.finditer(text):
        yield text.count("\n", 0, m.start()) + 1, m.group(1)


def main():
    repo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[2])
    errors = check(repo.resolve())
    for e in errors:
        print(e)
    print(f"{len(errors)} violation(s) of the layering" if errors else "layering holds")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
