"""Resident memory of the weights (issue 21): a model in any type mix costs no more RAM than its
file (mapped) plus the one regrouped copy the CPU makes of its Q4_1, Q8_0 and Q5_0 matrices of 16n
rows (kernels/cpu/row_groups.h) and a fixed runtime, so that no type is dequantized or copied a
second time. Peak RSS of `tokenmill generate`, from the kernel's rusage of the child."""
import json
import os
import subprocess

import pytest

BIN = os.path.join(os.environ["TOKENMILL_BIN_DIR"], "tokenmill")
MODELS = os.environ["TOKENMILL_MODELS_DIR"]
# SmolLM2 measured 25 MiB beyond file + copies on every type mix (tokenizer, 12 tokens of KV,
# activations, the libraries); Gemma 3 90 MiB (its 262k-token vocabulary and logits rows).
# Any second copy of the K-quant or Q5_0 matrices of these files would pass these margins.
RUNTIME_MIB = {"smollm2": 40, "gemma3": 110}
FILES = [("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2"),
         ("requantized/SmolLM2-135M-Instruct.Q4_K_M.gguf", "smollm2"),
         ("requantized/SmolLM2-135M-Instruct.Q6_K.gguf", "smollm2"),
         ("requantized/SmolLM2-135M-Instruct.Q5_K_M.gguf", "smollm2"),
         ("gemma-3-270m-q4_k_m.gguf", "gemma3")]
REGROUPED = {"q4_1", "q8_0", "q5_0"}


def sanitized():
    """ASan and TSan keep freed memory and shadow every byte: RSS means nothing there."""
    libs = subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout
    return "libasan" in libs or "libtsan" in libs


def copy_bytes(tensors):
    """Bytes of the matrices the CPU regroups: token_embd stays as in the file unless it is
    also the (tied) output."""
    names = {t["name"] for t in tensors}
    total = 0
    for t in tensors:
        if t["type"] in REGROUPED and len(t["shape"]) == 2 and t["shape"][1] % 16 == 0:
            if t["name"] != "token_embd.weight" or "output.weight" not in names:
                total += t["bytes"]
    return total


@pytest.mark.parametrize("name,family", FILES, ids=[f[0].split("/")[-1] for f in FILES])
def test_weights_cost_the_file_plus_one_regrouped_copy(name, family):
    if sanitized():
        pytest.skip("a sanitizer build: RSS includes its shadow memory and quarantine")
    path = os.path.join(MODELS, name)
    if not os.path.exists(path):
        pytest.skip(f"{path} not made (scripts/setup makes it)")
    info = json.loads(subprocess.run([BIN, "info", "--model", path], check=True,
                                     capture_output=True, text=True).stdout)
    child = subprocess.Popen([BIN, "generate", "--model", path, "--prompt", "Hello there",
                              "--max-tokens", "8", "--threads", "2"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, child.stderr.read().decode()
    peak = usage.ru_maxrss * 1024
    file_bytes = os.path.getsize(path)
    copies = copy_bytes(info["tensors"])
    limit = file_bytes + copies + RUNTIME_MIB[family] * 2**20
    mib = 2**20
    print(f"{name}: peak {peak / mib:.1f} MiB = file {file_bytes / mib:.1f} + copies "
          f"{copies / mib:.1f} + {(peak - file_bytes - copies) / mib:.1f}")
    assert peak <= limit, (f"peak RSS {peak / mib:.1f} MiB > file {file_bytes / mib:.1f} + "
                           f"copies {copies / mib:.1f} + runtime {RUNTIME_MIB[family]} MiB")
    # The weights were all read: the file is resident, not merely mapped.
    assert peak >= file_bytes + copies
