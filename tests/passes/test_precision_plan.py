"""What the design keeps in float32 whatever the precision, checked in the plans (no device needed)
on every profile and precision, and the GRN regression it was written for (issue 38).

Statistics one of our kernels passes to another (sums of squares, partial sums over slices, the
scratch partials of the split excitation) stay float32 tensors with float32 storage, in images as
in buffers: rounded to half they lose the precision the float32 kernels computed them in, and
ConvNeXt-V2's sums of squares over a 56 x 56 map pass half's largest value (65504).
"""

import re
import numpy as np
import pytest

from helpers.onnx_graphs import conv_node, grn_block, group_norm_nodes, int_pattern_graph, lite_mla_graph, mbconv_se, pattern_graph
from helpers.xca_graphs import sdta_model
from tir_adreno import compile_model
from tir_adreno.compiler import compile_plan
from tir_adreno.reference import conv2d_nchw, reference_outputs, relative_error
from tir_adreno.strategy import excite as excite_strategy
from tir_adreno.strategy.precision import PRECISIONS, PrecisionError
from tir_adreno.strategy.profile import get_profile

PROFILES = ("adreno", "pocl", "nvidia-h200")

#: (kernel family, parameter) holding statistics the design pins to float32 (docs/kernels.md,
#: docs/coverage.md), written by the first kernel and read by the next. Written out here, not
#: read from the pass (``FLOAT32_ATTR``): a kernel the pass forgets to pin must fail.
PINNED = {
    ("sum_squares_hw", "Out"),  # GRN's sums of squares over H, W
    ("grn_scale", "S"),
    ("group_norm_partials", "P"),  # the split group norm's per-slice statistics
    ("group_norm_apply", "P"),
    ("xca_partials", "P"),  # cross-covariance attention's partial dots and norms
    ("xca_finish", "P"),
    ("linear_kv_partials", "P"),  # linear attention's partial KV sums
    ("linear_kv_finish", "P"),
    ("excitation_split", "Part"),  # the split excitation's partial sums (scratch)
    ("depthwise_excitation", "Part"),
}


def family(label: str) -> str:
    return re.sub(r"\d+$", "", label)  # the pass numbers a family's second kernel: conv2d_nchw4c1


def _grn(size=9, channels=8):
    rng, inits = np.random.default_rng(0), {}
    return pattern_graph(grn_block(rng, inits, channels=channels), inits, size=size)


def _group_norm():
    """conv -> GroupNorm (2 groups of 4) -> 1x1 conv on 11 x 11 (a wide profile splits it)."""
    rng, inits = np.random.default_rng(7), {}
    nodes = [conv_node(rng, inits, "x", "c", 8, 3), *group_norm_nodes("c", "n", inits, 8, 2, rng),
             conv_node(rng, inits, "n", "y", 4, 8, k=1)]
    return int_pattern_graph(nodes, inits, size=11)


def _se():
    rng, inits = np.random.default_rng(22), {}
    nodes = [conv_node(rng, inits, "x", "a", 16, 3), *mbconv_se(rng, inits, "a", "y", 16, 4, "silu", "Sigmoid")]
    return pattern_graph(nodes, inits, size=28)


#: Graphs whose plans hold every pinned family on some profile: GRN, group norm (split on the
#: H200), EdgeNeXt's XCA (split on the H200), LiteMLA with heads straddling pixels (KV split on
#: the H200), an SE block (the depthwise conv fused with it on the H200, and apart).
GRAPHS = {"grn": _grn, "group_norm": _group_norm, "xca": lambda: sdta_model(24, 2, False, seed=1),
          "lite_mla": lambda: lite_mla_graph(2, 6), "se": _se}


def _pinned_params(plan, kernels):
    """(call label, parameter name, tensor id) of every pinned parameter in ``plan``."""
    found = []
    for call in plan.calls:
        params = kernels[call.kernel][call.function].params
        found += [(call.label, p.name, t) for p, t in zip(params, call.args) if (family(call.label), p.name) in PINNED]
    return found


def cases():
    """(graph, profile, precision): GRN (the bug) on every profile and precision; the others where
    their statistics are: in images on the adreno profile (pocl places as adreno does) and in
    buffers, in their split forms, on the H200's, in both half precisions."""
    yield from (("grn", profile, precision) for profile in PROFILES for precision in PRECISIONS)
    for name in [*GRAPHS, "se apart"]:
        if name != "grn":
            yield from ((name, "adreno", "float16_acc32"), (name, "nvidia-h200", "float16_acc32"), (name, "nvidia-h200", "float16"))


@pytest.fixture(scope="module")
def plans():
    """:func:`cases` compiled (the SE block also with its depthwise conv apart: ``excitation_split``):
    (graph, profile, precision) -> (plan, kernels), or the PrecisionError a profile gives a precision
    it cannot run."""
    out, models = {}, {}
    with pytest.MonkeyPatch.context() as mp:
        for name, profile, precision in cases():
            if name == "se apart":
                mp.setattr(excite_strategy, "DEPTHWISE_EXCITATION_PIXELS", None)
            model = models.setdefault(name, GRAPHS[name.split()[0]]())
            try:
                plan, kernels, _ = compile_plan(model, get_profile(profile), progress=lambda _: None, precision=precision)
            except PrecisionError as err:
                out[name, profile, precision] = err
                continue
            out[name, profile, precision] = plan, kernels
    return out


def test_statistics_stay_float32_on_every_profile_and_precision(plans):
    """Every pinned statistic is a float32 tensor stored in float32 (``storage`` None: not a half
    image, not a half buffer) in every plan, and the graphs reach every pinned family, in images
    (adreno, pocl) and in buffers (nvidia-h200)."""
    seen, scopes = set(), set()
    for (name, profile, precision), result in plans.items():
        if isinstance(result, PrecisionError):  # PoCL runs no half math: "float16" is refused, nothing else
            assert (profile, precision) == ("pocl", "float16"), (name, profile, precision, result)
            continue
        plan, kernels = result
        for label, param, t in _pinned_params(plan, kernels):
            tensor, where = plan.tensors[t], f"{name}/{profile}/{precision}: {label}.{param}"
            assert tensor.dtype == "float32" and tensor.storage is None, f"{where} is {tensor.storage or tensor.dtype}: {tensor}"
            seen.add((family(label), param))
            scopes.add((tensor.scope.startswith("global.texture"), precision))
    assert seen == PINNED, f"pinned families no graph reached: {sorted(PINNED - seen)}"
    assert {(True, "float16_acc32"), (False, "float16_acc32"), (True, "float16")} <= scopes, scopes  # images and buffers


def test_only_the_pinned_tensors_stay_float32_in_float16_acc32(plans):
    """The converse, so that no statistic escapes :data:`PINNED`: in float16_acc32 every float
    tensor only our kernels touch is half, except the pinned ones (the model's inputs and outputs,
    and the tickets of the split excitation, int32, are not half either)."""
    for (name, profile, precision), result in plans.items():
        if precision != "float16_acc32":
            continue
        plan, kernels = result
        pinned = {t for _, _, t in _pinned_params(plan, kernels)}
        upstream = {t for c in plan.calls if not c.ours for t in c.args}
        full = {i for i, t in enumerate(plan.tensors)
                if t.kind in ("temp", "const") and t.dtype == "float32" and t.storage is None and i not in upstream}
        assert full == pinned, (f"{name}/{profile}: float32 tensors not pinned {sorted(full - pinned)}, "
                                f"pinned ones not float32 {sorted(pinned - full)}")
        assert any(t.storage == "float16" for t in plan.tensors), (name, profile)


def test_grn_sums_of_squares_past_half_range_on_every_profile(device):
    """The GRN bug (issue 38): in float16_acc32 on the adreno and pocl profiles the sums of squares
    of a large map were stored in a half image, so sums past 65504 became inf and the block's
    output non-finite. A 24 x 24 map whose GRN input has channel sums of squares past 1.3e5, each
    profile's plan run here, against onnxruntime within half storage's error."""
    model = _grn(size=24)
    x = (np.random.default_rng(3).standard_normal((1, 3, 24, 24)) * 16).astype(np.float32)
    inits = {i.name: np.frombuffer(i.raw_data, np.float32).reshape(tuple(i.dims)) for i in model.graph.initializer}
    conv = conv2d_nchw(x.astype(np.float64), inits["c_w"].astype(np.float64), padding=(1,) * 4) + inits["c_b"][None, :, None, None]
    assert (conv**2).sum(axis=(2, 3)).max() > 2 * 65504, "the GRN input's sums of squares must exceed half's range"
    (ref,) = reference_outputs(model, {"x": x})
    for profile in PROFILES:
        compiled = compile_model(model, device, profile=get_profile(profile), progress=lambda _: None, precision="float16_acc32")
        (out,) = compiled.run({"x": x})
        assert np.all(np.isfinite(out)), f"{profile}: non-finite outputs"
        assert relative_error(out, ref) <= 1e-2, (profile, relative_error(out, ref))
