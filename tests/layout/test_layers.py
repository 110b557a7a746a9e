"""The layering check (check_layers.py): this repository passes, and a tree that breaks
either rule fails with a message naming the include."""
import pathlib
import sys
import textwrap

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import check_layers  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]


def write_tree(root, files):
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(textwrap.dedent(text))


def small_tree(root, model_source, model_links="tm_gguf"):
    write_tree(root, {
        "gguf/CMakeLists.txt": "add_library(tm_gguf gguf.cc)\n",
        "gguf/gguf.h": "#pragma once\n",
        "engine/engine.h": "#pragma once\n",
        "model/CMakeLists.txt": f"add_library(tm_model model.cc)\n"
                                f"target_link_libraries(tm_model PUBLIC {model_links})\n",
        "model/model.cc": model_source,
    })


def test_this_repository_holds_the_layering():
    assert check_layers.check(REPO) == []


def test_an_include_against_the_order_fails(tmp_path):
    small_tree(tmp_path, '#include "engine/engine.h"\n')
    errors = check_layers.check(tmp_path)
    assert errors == ["model/model.cc:1: includes engine/engine.h: model/ may not depend on engine/"]


def test_an_include_without_its_link_fails(tmp_path):
    small_tree(tmp_path, '#include "gguf/gguf.h"\n', model_links="tm_common")
    assert check_layers.check(tmp_path) == [
        "model/model.cc:1: includes gguf/gguf.h: tm_model does not link tm_gguf"]


def test_an_allowed_and_linked_include_passes(tmp_path):
    small_tree(tmp_path, '#include "gguf/gguf.h"\n')
    assert check_layers.check(tmp_path) == []


def family_tree(root, cuda_source):
    write_tree(root, {
        "model/arch/llama.cc": 'const ModelFamily kLlamaFamily{"llama", ReadConfig, LoadLayer,\n'
                               '                                Forward};\n',
        "model/arch/gpt_oss.cc": 'const ModelFamily kGptOssFamily{"gpt-oss", A, B, C};\n',
        "model/cuda/plan.cc": cuda_source,
    })


def test_a_family_name_in_the_cuda_pass_fails(tmp_path):
    family_tree(tmp_path, 'bool Runs(const std::string& arch) {\n'
                          '  return arch == "llama" || arch == "gpt-oss";\n}\n')
    errors = check_layers.check(tmp_path)
    assert [e.split(": names")[0] for e in errors] == ["model/cuda/plan.cc:2"] * 2
    assert 'names the model family "llama"' in errors[0]
    assert 'names the model family "gpt-oss"' in errors[1]


def test_family_names_in_comments_or_longer_literals_pass(tmp_path):
    family_tree(tmp_path, '// Runs what "llama" runs.\n/* not "gpt-oss" */\n'
                          'const char* kWhat = "llama weights";\n')
    assert check_layers.check(tmp_path) == []


def test_the_gateway_and_its_subfolders_stand_on_proto_and_common_only(tmp_path):
    write_tree(tmp_path, {
        "engine/engine.h": "#pragma once\n",
        "common/status.h": "#pragma once\n",
        "gateway/CMakeLists.txt": "add_library(tm_gateway http/connection.cc)\n"
                                  "target_link_libraries(tm_gateway PUBLIC tm_common)\n",
        "gateway/http/connection.cc": '#include "common/status.h"\n#include "engine/engine.h"\n',
        "server/server.cc": '#include "gateway/http/connection.h"\n',
    })
    assert check_layers.check(tmp_path) == [
        "gateway/http/connection.cc:2: includes engine/engine.h: "
        "gateway/ may not depend on engine/",
        "server/server.cc:1: includes gateway/http/connection.h: "
        "server/ may not depend on gateway/",
    ]
