"""Plots of the benchmark JSON results: per-layer speed, roofline, end-to-end times.

    python benchmarks/plots.py [benchmarks/results/*.json]

Writes a PNG next to each JSON it knows (conv_layers, models_e2e, catalogue).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
#: Measured ceilings (docs/design.md) for the roofline: fp32 FLOP/s and copy bandwidth.
CEILINGS = {"h200": (51.2e12, 4.22e12)}
WAY_LABELS = {"ours_tex": "ours, textures", "ours_buf": "ours, buffers", "upstream": "upstream TVM OpenCL", "cudnn": "cuDNN fp32"}


def _conv_bytes(layer) -> int:
    n, c, h, w = layer["data_shape"]
    o, i, kh, kw = layer["weight_shape"]
    sh, sw = layer["strides"]
    ph, pw = layer["padding"][:2]
    oh = (h + 2 * ph - kh) // sh + 1
    ow = (w + 2 * pw - kw) // sw + 1
    return 4 * (n * c * h * w + o * i * kh * kw + n * o * oh * ow)


def _ceiling(device: str):
    return next((v for k, v in CEILINGS.items() if k in device.lower()), None)


def plot_conv_layers(doc, out: Path):
    layers = doc["layers"]
    ways = [w for w in WAY_LABELS if any(w in l["results"] and l["results"][w].get("gflops") for l in layers)]
    fig, (ax, roof) = plt.subplots(1, 2, figsize=(18, 6), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / max(len(ways), 1)
    for k, way in enumerate(ways):
        xs = [i + k * width for i in range(len(layers))]
        ys = [(l["results"].get(way) or {}).get("gflops") or 0 for l in layers]
        ax.bar(xs, ys, width, label=WAY_LABELS[way])
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(layers))])
    ax.set_xticklabels([l["key"] for l in layers], rotation=90, fontsize=6)
    ax.set_ylabel("GFLOP/s")
    ax.set_yscale("log")
    ax.set_title(f"conv2d layers, batch 1, fp32 on {doc['device']}")
    ax.legend()
    for way in ways:
        pts = [
            (l["flops"] / _conv_bytes(l["layer"]), l["results"][way]["gflops"])
            for l in layers
            if (l["results"].get(way) or {}).get("gflops")
        ]
        roof.scatter([p[0] for p in pts], [p[1] for p in pts], s=10, label=WAY_LABELS[way])
    ceiling = _ceiling(doc["device"])
    if ceiling:
        peak, bandwidth = ceiling
        xs = [0.5 * 1.3**i for i in range(40)]
        roof.plot(xs, [min(peak, bandwidth * x) / 1e9 for x in xs], "k--", label="fp32 / copy ceiling")
    roof.set_xscale("log")
    roof.set_yscale("log")
    roof.set_xlabel("FLOP per byte (compulsory traffic)")
    roof.set_ylabel("GFLOP/s")
    roof.set_title("roofline")
    roof.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_models_e2e(doc, out: Path):
    results = doc["results"]
    labels = [r["model"] for r in results]
    series = {
        "ours (the profile's placement)": [r["ours"]["kernel_ms"] for r in results],
        "upstream TVM OpenCL": [r["upstream"]["kernel_ms"] for r in results],
    }
    for way, name in (("ours_direct", "ours without the tiled kernel (--direct)"), ("ours_nofuse", "ours unfused"),
                      ("ours_texture", "ours, all textures"), ("ours_buffer", "ours, all buffers")):
        if all(way in r for r in results):
            series[name] = [r[way]["kernel_ms"] for r in results]
    if all(r.get("cudnn") for r in results):
        series["cuDNN eager"] = [r["cudnn"]["eager_ms"] for r in results]
        series["cuDNN graph"] = [r["cudnn"]["graph_ms"] for r in results]
    fig, ax = plt.subplots(figsize=(8, 5))
    width = 0.8 / len(series)
    for k, (name, ys) in enumerate(series.items()):
        ax.bar([i + k * width for i in range(len(labels))], ys, width, label=name)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))])
    ax.set_xticklabels(labels)
    ax.set_ylabel("ms per inference (kernel time)")
    ax.set_yscale("log")
    ax.set_title(f"end to end, batch 1, 224, fp32 on {doc['device']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_catalogue(doc, out: Path):
    """Per catalogue model: our share of kernel time (bars) and layout transforms (dots), with the issue's bars."""
    results = {name: r for name, r in doc["results"].items() if "failure" not in r}
    labels = list(results)
    fig, share = plt.subplots(figsize=(max(8, 0.45 * len(labels)), 5))
    share.bar(range(len(labels)), [100 * r["ours_share"] for r in results.values()], color="tab:blue", label="ours, % of kernel time")
    share.axhline(100 * doc["min_ours_share"], color="tab:blue", ls="--", lw=1)
    share.set_ylabel("% of kernel time in our kernels")
    share.set_ylim(0, 100)
    share.set_xticks(range(len(labels)))
    share.set_xticklabels(labels, rotation=90, fontsize=7)
    transforms = share.twinx()
    transforms.plot(range(len(labels)), [r["layout_transforms"] for r in results.values()], "o", color="tab:red", label="layout transforms")
    transforms.axhline(doc["max_transforms"], color="tab:red", ls="--", lw=1)
    transforms.set_ylabel("layout transforms (blocked <-> plain)")
    transforms.set_yscale("symlog", linthresh=1)
    transforms.set_ylim(0, 2 * max([r["layout_transforms"] for r in results.values()] + [doc["max_transforms"]]))
    share.set_title(f"catalogue coverage on {doc['device']} (dashed: the issue's bars)")
    fig.legend(loc="lower left", fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


PLOTTERS = {"conv_layers": plot_conv_layers, "models_e2e": plot_models_e2e, "catalogue": plot_catalogue}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path, help="result JSON files (default: all in benchmarks/results)")
    paths = parser.parse_args(argv).paths or sorted(RESULTS.glob("*.json"))
    for path in paths:
        doc = json.loads(path.read_text())
        plotter = PLOTTERS.get(doc.get("benchmark"))
        if plotter is None:
            continue
        out = path.with_suffix(".png")
        plotter(doc, out)
        print(out)


if __name__ == "__main__":
    main(sys.argv[1:])
