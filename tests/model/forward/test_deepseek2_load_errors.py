"""deepseek2 files tokenmill cannot run are refused at load naming the key or tensor to fix,
never a crash: latent widths out of range or disagreeing with each other, a rope part as wide
as the key, expert groups that do not divide the experts or cannot hold the used ones, a
gating function other than softmax or sigmoid, multi-token-prediction layers, a missing
per-head matrix. The files are tests/reference/tiny_families/deepseek2.py's with one thing
changed.
NaN YaRN multipliers too, which would scale every score by NaN."""
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
from tiny_families import deepseek2  # noqa: E402

from load_errors import load_error  # noqa: E402


def mla_keys(kv_lora=deepseek2.KV_LORA, key_length=deepseek2.KV_LORA + deepseek2.QK_ROPE,
             key_length_mla=deepseek2.QK_NOPE + deepseek2.QK_ROPE, extra=None):
    def write(w):
        w.w.add_kv_lora_rank(kv_lora)
        w.w.add_key_length(key_length)
        w.w.add_value_length(deepseek2.KV_LORA)
        w.w.add_key_length_mla(key_length_mla)
        w.w.add_value_length_mla(deepseek2.V_HEAD)
        w.w.add_rope_dimension_count(deepseek2.QK_ROPE)
        if extra:
            extra(w)
    return write


CASES = {
    "latent_zero": (dict(keys=mla_keys(kv_lora=0)),
                    "deepseek2.attention.kv_lora_rank is 0: it must be between 1 and 1048576"),
    "latent_huge": (dict(keys=mla_keys(kv_lora=1 << 31)),
                    "deepseek2.attention.kv_lora_rank is 2147483648"),
    "row_disagrees": (dict(keys=mla_keys(key_length=57)),
                      "deepseek2.attention.key_length 57, value_length 40 and head_count_kv 1 "
                      "must be the latent's: kv_lora_rank + rope.dimension_count (56)"),
    "rope_whole_key": (dict(keys=mla_keys(key_length_mla=deepseek2.QK_ROPE)),
                       "deepseek2.rope.dimension_count 16 must be positive and less than the "
                       "key's head size 16"),
    "groups_not_dividing": (dict(N_GROUP=5),
                            "deepseek2.expert_group_count 5 and expert_group_used_count 2 do "
                            "not fit 24 experts of which 3 are used"),
    "groups_too_few": (dict(N_GROUP=12, N_GROUP_USED=1),
                       "deepseek2.expert_group_count 12 and expert_group_used_count 1 do not "
                       "fit 24 experts of which 3 are used"),
    "gating": (dict(v3_expert_keys=lambda w: (w.w.add_expert_shared_count(2), w.w.add_uint32(
        "deepseek2.expert_gating_func", 3))),
               "deepseek2.expert_gating_func 3 is not supported: softmax (1) and sigmoid (2) "
               "are"),
    "log_multiplier_nan": (dict(yarn_keys=lambda w: w.w.add_rope_scaling_yarn_log_mul(
        float("nan"))), "deepseek2.rope.scaling.yarn_log_multiplier and attn_factor must be "
                        "finite numbers"),
    "mtp_layers": (dict(keys=mla_keys(extra=lambda w: w.w.add_uint32(
        "deepseek2.nextn_predict_layers", 1))),
        "deepseek2.nextn_predict_layers is not supported"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_deepseek2_files_are_refused_naming_what_to_fix(tmp_path, monkeypatch, case):
    changes, message = CASES[case]
    for name, value in changes.items():
        monkeypatch.setattr(deepseek2, "mla_keys" if name == "keys" else name, value)
    path = str(tmp_path / "deepseek2.gguf")
    deepseek2.write(path)
    assert message in load_error(path)


def test_a_missing_per_head_matrix_is_named(tmp_path, monkeypatch):
    attention = deepseek2.attention

    def without_v_b(w, p, q_lora, fused):
        add_tensor = w.w.add_tensor
        w.w.add_tensor = lambda name, *a, **k: (None if name.endswith("attn_v_b.weight")
                                                 else add_tensor(name, *a, **k))
        attention(w, p, q_lora, fused)
        w.w.add_tensor = add_tensor
    monkeypatch.setattr(deepseek2, "attention", without_v_b)
    path = str(tmp_path / "deepseek2.gguf")
    deepseek2.write(path)
    assert "no tensor 'blk.0.attn_v_b.weight'" in load_error(path)
