"""Writes a LoRA adapter of a GGUF model in llama.cpp's adapter form (general.type adapter,
adapter.type lora, adapter.lora.alpha; what convert_lora_to_gguf.py writes): random low-rank
pairs <name>.lora_a (rank rows of the matrix's inputs) and <name>.lora_b (its outputs' rows of
rank) for the attention and feed-forward matrices of every layer, in F32 (B in F16 if asked),
scaled so that the update moves the model's greedy output without drowning it.
  .venv/bin/python tests/reference/make_lora_adapter.py BASE.gguf OUT.gguf [--rank 16]
      [--alpha 32] [--seed 0] [--gain 0.5]
The e2e tests make theirs with write_adapter (tests/e2e/test_lora.py)."""
import argparse

import gguf
import numpy as np

ADAPTED = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def write_adapter(base, out, rank=16, alpha=32.0, seed=0, gain=0.5, b_dtype=np.float32,
                  b_in_f16=False):
    """The adapter of `base` at `out`; returns the number of matrices adapted. B·A's entries
    have a standard deviation of about gain / sqrt(inputs) before the scale alpha / rank. B is
    stored as b_dtype (np.float16: as convert_lora_to_gguf.py's default writes it), its values
    rounded to f16 first when b_in_f16 (an F32 twin of the F16 file of the same seed)."""
    reader = gguf.GGUFReader(base)
    arch = reader.fields["general.architecture"].contents()
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(out, arch)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(alpha))
    adapted = 0
    for tensor in reader.tensors:
        parts = tensor.name.split(".")
        if len(parts) != 4 or parts[0] != "blk" or parts[2] not in ADAPTED or parts[3] != "weight":
            continue
        n_in, n_out = int(tensor.shape[0]), int(tensor.shape[1])  # ggml order: inputs first
        a = rng.standard_normal((rank, n_in)) / np.sqrt(n_in)
        b = rng.standard_normal((n_out, rank)) * gain / np.sqrt(rank)
        writer.add_tensor(tensor.name + ".lora_a", a.astype(np.float32))
        if b_in_f16 or b_dtype == np.float16:
            b = b.astype(np.float16)
        writer.add_tensor(tensor.name + ".lora_b", b.astype(b_dtype))
        adapted += 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return adapted


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("out")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--alpha", type=float, default=32.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gain", type=float, default=0.5)
    args = parser.parse_args()
    n = write_adapter(args.base, args.out, args.rank, args.alpha, args.seed, args.gain)
    print(f"{args.out}: {n} matrices adapted, rank {args.rank}, alpha {args.alpha}")


if __name__ == "__main__":
    main()
