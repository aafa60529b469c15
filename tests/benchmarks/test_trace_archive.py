"""benchmarks/trace_archive.py: a TorchScript trace's code rewritten for the GPU baseline (no torch
needed: the archive is a zip of text), on a made-up archive shaped as torch.jit.save writes one."""

import io
import zipfile

from helpers.benchmarks import benchmark

trace_archive = benchmark("trace_archive")

CODE = (b"def forward(self, x: Tensor) -> Tensor:\n"
        b"    pos = torch.zeros([1, 4], dtype=6, layout=None, device=torch.device(\"cpu\"), pin_memory=False)\n"
        b"    y = torch._convolution(x, weight, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1, False, False, True, True)\n"
        b"    z = torch.add(torch._convolution(y, w2, b2, [1, 1], [0, 0], [1, 1], False, [0, 0], 4, False, True, True, True), pos)\n"
        b"    return torch.mul(z, True)\n")


def _archive(files: dict) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return out.getvalue()


def _code(archive: bytes) -> bytes:
    return zipfile.ZipFile(io.BytesIO(archive)).read("m/code/__torch__/m.py")


def test_convs_run_without_tf32_with_cudnn_search_and_made_tensors_on_the_device():
    out = trace_archive.traced_on(_archive({"m/code/__torch__/m.py": CODE, "m/data.pkl": b"weights"}), "cuda")
    code = _code(out)
    assert b'torch.device("cuda")' in code and b'torch.device("cpu")' not in code
    lines = [ln for ln in code.splitlines() if b"_convolution(" in ln]
    assert lines[0].endswith(b"[0, 0], 1, True, False, True, False)")  # benchmark on, allow_tf32 off
    assert lines[1].endswith(b"[0, 0], 4, True, True, True, False), pos)")  # deterministic kept; the call inside another
    assert code.endswith(b"return torch.mul(z, True)\n")  # booleans outside a conv untouched
    assert zipfile.ZipFile(io.BytesIO(out)).read("m/data.pkl") == b"weights"


def test_the_cpu_trace_and_debug_tables():
    archive = _archive({"m/code/__torch__/m.py": CODE, "m/code/__torch__/m.py.debug_pkl": b"ranges"})
    assert trace_archive.traced_on(archive, "cpu") == archive  # as exported
    names = zipfile.ZipFile(io.BytesIO(trace_archive.traced_on(archive, "cuda"))).namelist()
    assert names == ["m/code/__torch__/m.py"]  # source ranges of the old text left out
