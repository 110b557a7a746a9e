"""qwen3moe with Q8_0 matrices (experts included): on the CPU each expert runs in the regrouped
copy (16 rows interleaved per expert, Model::FromFile), the path a Q8_0 or Q4_1 MoE file
takes; 8 experts, top-2, no ties. The regrouped kernels sum each block in one float where
ggml's order sums 8 lanes (kernels/cpu/kernel_table.h), so an int8 of a later layer's
activations may round the other way: logits within LOGIT_BOUND (measured 0.078), not the
F32 families' 1e-3, and the batch invariance bit for bit as every family."""
from gguf import GGMLQuantizationType as T

from . import qwen3moe
from .common import TinyWriter

ARCH = "qwen3moe"
N_EMBD, N_HEAD, N_KV, HEAD_DIM, N_FF, N_LAYER = 64, 4, 2, 32, 64, 2
N_EXPERT, N_USED, N_FF_EXP = 8, 2, 32
LOGIT_BOUND = 0.15


def write(path):
    w = TinyWriter(path, ARCH, seed=34, matrix_type=T.Q8_0)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_KV,
              head_dim=HEAD_DIM, rope_base=1000000.0)
    w.expert_keys(N_EXPERT, N_USED, n_ff_exp=N_FF_EXP)
    qwen3moe.tensors(w, N_LAYER, N_EMBD, N_HEAD, N_KV, HEAD_DIM, N_EXPERT, N_FF_EXP)
    w.close()
