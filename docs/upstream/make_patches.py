"""Write the proposed TVM patches of docs/upstream/ as unified diffs against TVM main.

    python docs/upstream/make_patches.py /path/to/apache/tvm [REV]

reads each file at REV (default ``main``) of a TVM git checkout (``git show``), applies our
replacements and writes ``docs/upstream/patches/defectNN-*.diff`` (``git apply``-able in a
TVM checkout with ``-p1``). The Python-side replacements are the ones the tests apply to the
installed wheel (``tests/upstream/patches.py``); the C++ ones are below and untested (the
wheel has no C++ sources). Each replacement must match exactly once, optionally after an
anchor string, so a diff is only written while it still applies to REV.
"""

import difflib
import inspect
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests" / "upstream"))

import patches  # noqa: E402  (tests/upstream/patches.py)

# (old, new) or (old, new, anchor): replace the first `old` after `anchor`.
CPP = {
    "defect01-convert-layout-no-json-copy": {
        "src/relax/transform/convert_layout.cc": [
            (
                "        attrs->index_map = ffi::FromJSONGraph(ffi::ToJSONGraph(index_map)).as_or_throw<IndexMap>();\n",
                "        // The map was just built and is not shared: no deep copy is needed, and the\n"
                "        // JSON round trip crashes on the PrimTypes inside it (ToJSONGraph segfault).\n"
                "        attrs->index_map = std::move(index_map);\n",
            )
        ]
    },
    "defect03-texture-store-void-and-pixel-check": {
        "src/s_tir/backend/adreno/texture_flatten.cc": [
            (
                "      stmt = Evaluate(Call(args[0]->ty, builtin::texture2d_store(), args));\n",
                "      // A store yields nothing. Typed as the texture's pointer, VectorizeLoop took it\n"
                "      // for a non-primitive call and scalarized the loop around it (defect 3).\n"
                "      stmt = Evaluate(Call(PrimType::Void(), builtin::texture2d_store(), args));\n",
            )
        ],
        "src/backend/opencl/codegen/codegen_opencl.cc": [
            (
                "    PrimType buffer_type = texture.pointer_type->element_type.as_or_throw<PrimType>();\n",
                "    PrimType buffer_type = texture.pointer_type->element_type.as_or_throw<PrimType>();\n"
                "    // write_image* stores a whole pixel: refuse a narrower value instead of\n"
                "    // broadcasting it with as_floatN() into every lane.\n"
                "    PrimType value_type = op->args[5].as_or_throw<PrimExpr>().ty();\n"
                "    TVM_FFI_ICHECK_EQ(value_type.lanes() * value_type.bits(), channel_size)\n"
                "        << \"texture2d_store needs a whole pixel, got a value of type \" << value_type;\n",
                "builtin::texture2d_store())) {\n    TextureArgument",
            )
        ],
    },
    "defect04-texture-load-keeps-lanes": {
        "src/s_tir/backend/adreno/texture_flatten.cc": [
            (
                "      expr = Call(op->buffer->dtype, builtin::texture2d_load(), args).as_or_throw<PrimExpr>();\n",
                "      // The load's own type: a Ramp over the lane axis reads a whole pixel (e.g.\n"
                "      // float32x4), not one element of the buffer's dtype.\n"
                "      expr = Call(op->ty, builtin::texture2d_load(), args).as_or_throw<PrimExpr>();\n",
            )
        ]
    },
    "defect05-wheel-with-opencl-runtime": {
        "pyproject.toml": [
            (
                'USE_CUDA = "OFF"\n',
                'USE_CUDA = "OFF"\n'
                "# The OpenCL codegen is always built; the runtime lets tvm.opencl() run what it\n"
                "# generates (Adreno, Mali, Intel, PoCL). It links the Khronos ICD loader\n"
                "# (libOpenCL.so.1), which the system provides.\n"
                'USE_OPENCL = "ON"\n',
            ),
            (
                "auditwheel repair --exclude libtvm_ffi.so ",
                "auditwheel repair --exclude libtvm_ffi.so --exclude libOpenCL.so.1 ",
            ),
        ]
    },
    "defect06-conv2d-layout-blocked-ndim": {
        "src/relax/op/nn/convolution.cc": [
            (
                "      data_layout = TransposeLike(InitialLayout(4), attrs->data_layout, desired_data_layout);\n"
                "      weight_layout = TransposeLike(InitialLayout(4), attrs->kernel_layout, desired_weight_layout);\n"
                "      output_layout = TransposeLike(InitialLayout(4), attrs->out_layout, desired_output_layout);\n",
                "      // Same rank, but not always 4: a conv2d already in NCHW4c has 5-D tensors.\n"
                "      data_layout =\n"
                "          TransposeLike(InitialLayout(input_layout.ndim()), attrs->data_layout, desired_data_layout);\n"
                "      weight_layout = TransposeLike(InitialLayout(kernel_layout.ndim()), attrs->kernel_layout,\n"
                "                                    desired_weight_layout);\n"
                "      output_layout = TransposeLike(InitialLayout(out_layout.ndim()), attrs->out_layout,\n"
                "                                    desired_output_layout);\n",
                "InferLayoutOutput InferLayoutConv2d(",
            ),
            (
                "        data_layout = LayoutDecision(InitialLayout(4));\n"
                "        weight_layout = LayoutDecision(InitialLayout(4));\n",
                "        data_layout = LayoutDecision(InitialLayout(input_layout.ndim()));\n"
                "        weight_layout = LayoutDecision(InitialLayout(kernel_layout.ndim()));\n",
                "InferLayoutOutput InferLayoutConv2d(",
            ),
            (
                "  new_attrs->data_layout =\n"
                "      TransposeLike(attrs->data_layout, InitialLayout(4), data_layout->layout).name();\n"
                "  new_attrs->kernel_layout =\n"
                "      TransposeLike(attrs->kernel_layout, InitialLayout(4), weight_layout->layout).name();\n"
                "  new_attrs->out_layout =\n"
                "      TransposeLike(attrs->out_layout, InitialLayout(4), output_layout->layout).name();\n",
                "  const int data_ndim = tirx::SLayout(attrs->data_layout).ndim();\n"
                "  const int kernel_ndim = tirx::SLayout(attrs->kernel_layout).ndim();\n"
                "  const int out_ndim = tirx::SLayout(attrs->out_layout).ndim();\n"
                "  new_attrs->data_layout =\n"
                "      TransposeLike(attrs->data_layout, InitialLayout(data_ndim), data_layout->layout).name();\n"
                "  new_attrs->kernel_layout =\n"
                "      TransposeLike(attrs->kernel_layout, InitialLayout(kernel_ndim), weight_layout->layout)\n"
                "          .name();\n"
                "  new_attrs->out_layout =\n"
                "      TransposeLike(attrs->out_layout, InitialLayout(out_ndim), output_layout->layout).name();\n",
                "InferLayoutOutput InferLayoutConv2d(",
            ),
        ]
    },
    "defect08-texture-store-no-ssa-cache": {
        "src/backend/opencl/codegen/codegen_opencl.cc": [
            (
                "    std::string value;\n"
                "    value = this->SSAGetID(ss.str(), buffer_type.WithLanes(channel_size / buffer_type.bits()));\n",
                "    // Print the value in place. SSAGetID caches by expression text, not invalidated\n"
                "    // by stores: a second store of `vload4(0, px)` after a write to px reused the\n"
                "    // variable bound before the write (a stale pixel).\n"
                "    std::string value = ss.str();\n",
            )
        ]
    },
    "defect09-vector-select-mask": {
        "src/backend/opencl/codegen/codegen_opencl.cc": [
            (
                "  PrintExpr(op->condition, oss);\n"
                "  if (op_ty.code() == DLDataTypeCode::kDLFloat) {\n",
                "  PrintExpr(op->condition, oss);\n"
                "  if (op_ty.lanes() > 1) {\n"
                "    // Vector select() tests the most significant bit of each mask lane. A vector\n"
                "    // comparison gives -1/0, but a broadcast or converted bool gives 1/0, which\n"
                "    // reads as false: compare with zero to get a -1/0 mask in every case.\n"
                "    PrimType mask_ty = PrimType::Int(op_ty.bits(), op_ty.lanes());\n"
                "    os << \"(\" << CastFromTo(oss.str(), op->condition.ty(), mask_ty) << \" != (\";\n"
                "    PrintType(mask_ty, os);\n"
                "    os << \")(0))\";\n"
                "  } else if (op_ty.code() == DLDataTypeCode::kDLFloat) {\n",
            )
        ]
    },
    "defect10-thread-sync-loop-carried-in-condition": {
        "src/s_tir/transform/thread_storage_sync.cc": [
            (
                "        if (sync_before_stmt) {\n"
                "          TVM_FFI_ICHECK_EQ(condition_counter(), 0) << \"Cannot insert syncs inside condition\";\n"
                "          syncs_inserted_.insert(s.stmt);\n"
                "          break;\n"
                "        }\n",
                "        if (sync_before_stmt) {\n"
                "          if (condition_counter() != 0) {\n"
                "            // A loop-carried conflict under a (thread-dependent) condition. No barrier\n"
                "            // can go there; the accesses stay exposed, so the planner of the enclosing\n"
                "            // sequence puts its barriers before and after the condition instead.\n"
                "            break;\n"
                "          }\n"
                "          syncs_inserted_.insert(s.stmt);\n"
                "          break;\n"
                "        }\n",
            )
        ]
    },
    "defect14-specialize-int-width": {
        "src/tirx/ir/specialize.cc": [
            (
                "    auto expr_equal = [&](const Expr& lhs, const Expr& rhs) {\n",
                "    auto expr_equal = [&](const Expr& lhs, const Expr& rhs) {\n"
                "      // Static extents: an int64 call-site extent equals an int32 buffer extent of the\n"
                "      // same value (TVMScript writes static shapes as int32, Relax as int64).\n"
                "      const auto* lhs_int = lhs.as<IntImmNode>();\n"
                "      const auto* rhs_int = rhs.as<IntImmNode>();\n"
                "      if (lhs_int && rhs_int) {\n"
                "        return lhs_int->value == rhs_int->value;\n"
                "      }\n",
                "void UpdateSpecializeVarMap(",
            )
        ]
    },
    "defect15-lower-cross-thread-reduction": {
        "src/s_tir/transform/lower_cross_thread_reduction.cc": [
            (
                "    if (wb_buffers[0].scope() != \"local\") {\n",
                "    if (!realize->predicate->IsInstance<AndNode>() && !is_one(realize->predicate)) {\n"
                "      // A one-clause predicate (e.g. `ts < extent` from a split) has no AndNode for\n"
                "      // the visitor above: keep it too unless it uses a reduction loop var.\n"
                "      bool uses_reduction_var = false;\n"
                "      for (const Var& var : UndefinedVars(realize->predicate)) {\n"
                "        uses_reduction_var |= reduction_loop_vars.count(var.get()) > 0;\n"
                "      }\n"
                "      if (!uses_reduction_var) {\n"
                "        wb_predicate = wb_predicate && realize->predicate;\n"
                "      }\n"
                "    }\n"
                "    if (wb_buffers[0].scope() != \"local\") {\n",
                "PrimExpr wb_predicate = IntImm::Bool(true);",
            )
        ]
    },
    "defect16-region-slice-extent": {
        "python/tvm/tirx/buffer.py": [
            (
                "                    region.append(Range.from_min_extent(start, analyzer.simplify(stop - start)))\n",
                "                    if (\n"
                "                        isinstance(stop, tvm.tirx.Add)\n"
                "                        and isinstance(start, tvm.ir.Expr)\n"
                "                        and tvm.ir.structural_equal(stop.a, start)\n"
                "                    ):\n"
                "                        # `start:start + extent`, as the printer writes a region: keep\n"
                "                        # the extent as written (simplifying stop - start reorders it)\n"
                "                        extent = stop.b\n"
                "                    else:\n"
                "                        extent = analyzer.simplify(stop - start)\n"
                "                    region.append(Range.from_min_extent(start, extent))\n",
            )
        ]
    },
}

# Python-side patches (tested against the wheel by tests/upstream), plus what a diff
# against main needs beyond the function bodies the tests re-compile.
PY = {
    "defect07-adreno-tir-pipeline-selectable": patches.PATCH_7,
    "defect11-parser-bind-once-assigned-scalar": patches.PATCH_11,
    "defect12-dlight-gemv-unit-reduction": patches.PATCH_12,
    "defect13-dlight-reduction-spatial-under-thread": patches.PATCH_13,
    "defect15-dlight-gemv": patches.PATCH_15,
    "defect17-macro-lookup-frame-walk": patches.PATCH_17,
}
PY_EXTRA = {
    "defect11-parser-bind-once-assigned-scalar": {
        "python/tvm/tirx/script/parser/parser.py": [
            (
                "\n\ndef bind_assign_value(\n",
                "\n\n" + inspect.getsource(patches._assigned_once) + "\n\ndef bind_assign_value(\n",
            )
        ]
    }
}


def apply(text, replacements, where):
    for rep in replacements:
        old, new = rep[0], rep[1]
        start = text.index(rep[2]) if len(rep) > 2 else 0
        head, tail = text[:start], text[start:]
        if tail.count(old) < 1 or (len(rep) == 2 and text.count(old) != 1):
            raise SystemExit(f"{where}: patch context not found exactly once:\n{old}")
        text = head + tail.replace(old, new, 1)
    return text


def main(tvm_repo, rev="main"):
    out = HERE / "patches"
    out.mkdir(exist_ok=True)
    jobs = dict(CPP)
    for name, patch in PY.items():
        jobs[name] = {path: list(repl) for path, (_ref, repl) in patch.items()}
        for path, repl in PY_EXTRA.get(name, {}).items():
            jobs[name][path] = repl + jobs[name].get(path, [])
    commit = subprocess.run(
        ["git", "-C", tvm_repo, "rev-parse", rev], capture_output=True, text=True, check=True
    ).stdout.strip()
    for name, files in sorted(jobs.items()):
        diff = [f"# {name}: proposed patch against apache/tvm {rev} at {commit}\n"]
        for path, repl in files.items():
            text = subprocess.run(
                ["git", "-C", tvm_repo, "show", f"{rev}:{path}"], capture_output=True, text=True, check=True
            ).stdout
            new = apply(text, repl, f"{name} {path}")
            diff += difflib.unified_diff(
                text.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=3
            )
        (out / f"{name}.diff").write_text("".join(diff))
        print(out / f"{name}.diff")


if __name__ == "__main__":
    main(*sys.argv[1:])
