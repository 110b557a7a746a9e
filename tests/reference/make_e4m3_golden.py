"""FP8 E4M3 golden values from ml_dtypes (an independent implementation of the OCP
"e4m3fn" type) for tests/kernels/cuda/kernel_math_test.cc.

Writes tests/data/kv/e4m3_golden.txt: a line "decode CODE FLOAT_BITS" for each of the 256
codes, then "encode FLOAT_BITS CODE" for every representable value, every midpoint between
neighbours (the ties), the floats just beside each midpoint, and random floats over the
whole range. Only |x| < 464 is encoded here: ml_dtypes turns larger values into NaN, where
our encoder saturates to 448 (tested separately).

  python3 -m venv /tmp/e4m3 && /tmp/e4m3/bin/pip install ml_dtypes==0.5.4 numpy
  /tmp/e4m3/bin/python tests/reference/make_e4m3_golden.py
"""
import pathlib

import ml_dtypes
import numpy as np

OUT = pathlib.Path(__file__).resolve().parent.parent / "data" / "kv" / "e4m3_golden.txt"


def bits(x):
    return int(np.array(x, dtype=np.float32).view(np.uint32))


def main():
    codes = np.arange(256, dtype=np.uint8)
    decoded = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    lines = [f"# ml_dtypes {ml_dtypes.__version__} float8_e4m3fn"]
    for code, value in zip(codes, decoded):
        lines.append(f"decode {int(code):02x} {bits(value):08x}")

    finite = np.unique(decoded[np.isfinite(decoded)])
    values = [finite]
    mids = (finite[:-1].astype(np.float64) + finite[1:]) / 2
    mids = mids.astype(np.float32)
    values += [mids, np.nextafter(mids, np.float32(np.inf)),
               np.nextafter(mids, np.float32(-np.inf))]
    rng = np.random.default_rng(13)
    for scale in (1e-4, 1e-2, 1.0, 30.0, 300.0):
        values.append((rng.standard_normal(400) * scale).astype(np.float32))
    values.append(np.float32([0.0, -0.0, 448.0, -448.0, 463.9, -463.9, 1e-30, -1e-30]))
    x = np.concatenate(values).astype(np.float32)
    x = x[np.abs(x) < 464]
    encoded = x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    for value, code in zip(x, encoded):
        lines.append(f"encode {bits(value):08x} {int(code):02x}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"{OUT}: {len(lines) - 1} lines")


if __name__ == "__main__":
    main()
