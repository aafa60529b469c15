"""How long a half conv sum may be before its accumulator should be float32 (emulated in NumPy).

Each output is a dot product of K half products, x >= 0 (post-ReLU) and w ~ N(0, 1/K), the
result stored in half; error = max |y - y_ref| / max |y_ref| against float64, for three ways of
summing: a half accumulator (``acc = half(acc + half(x * w))``), a float32 accumulator of the
half products (``acc += (float)(x * w)``) and of float32 products. The rule it decides
(``tir_adreno.strategy.precision.FLOAT_ACCUMULATION_MIN_K``) and the numbers: docs/precision.md.

    python benchmarks/half_accumulation.py     # no device: writes half_accumulation-numpy.json
"""

from __future__ import annotations

import argparse

import numpy as np

from common import fmt, print_table, write_json

LENGTHS = (9, 16, 25, 32, 64, 147, 256, 576, 1152, 2304, 4608)


def errors(k: int, outputs: int, rng) -> dict:
    x = np.abs(rng.standard_normal((outputs, k))).astype(np.float16)
    w = (rng.standard_normal((outputs, k)) / np.sqrt(k)).astype(np.float16)
    ref = (x.astype(np.float64) * w.astype(np.float64)).sum(1)
    half, float_of_half, float_of_float = np.zeros(outputs, np.float16), np.zeros(outputs, np.float32), np.zeros(outputs, np.float32)
    for i in range(k):
        product = x[:, i] * w[:, i]  # half
        half = (half + product).astype(np.float16)
        float_of_half += product.astype(np.float32)
        float_of_float += x[:, i].astype(np.float32) * w[:, i].astype(np.float32)
    scale = np.abs(ref).max()
    rounding = np.abs(ref.astype(np.float16).astype(np.float64) - ref).max() / scale  # the stored result's own
    row = {"k": k, "output_rounding": rounding}
    for name, acc in (("half", half), ("float32_half_products", float_of_half), ("float32", float_of_float)):
        row[name] = np.abs(acc.astype(np.float16).astype(np.float64) - ref).max() / scale
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outputs", type=int, default=20000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = [errors(k, args.outputs, rng) for k in LENGTHS]
    print_table(["K", "half acc", "float32 acc, half products", "float32 acc, float32 products", "output rounding", "half / rounding"],
                [[r["k"], fmt(r["half"], ".2e"), fmt(r["float32_half_products"], ".2e"), fmt(r["float32"], ".2e"),
                  fmt(r["output_rounding"], ".2e"), fmt(r["half"] / r["output_rounding"], ".1f")] for r in rows])
    print(f"wrote {write_json('half_accumulation', 'numpy', {'outputs': args.outputs, 'rows': rows})}")


if __name__ == "__main__":
    main()
