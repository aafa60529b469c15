"""A TorchScript trace archive's code, rewritten before ``torch.jit.load`` so that the trace runs on
the GPU as the eager model does (no torch here: the archive is a zip of text and tensors)."""

import io
import re
import zipfile

#: A traced conv: ``torch._convolution(..., benchmark, deterministic, cudnn_enabled, allow_tf32)``,
#: the last four the values of the global flags at trace time, as constants.
_TRACED_CONV = re.compile(rb"(torch\._convolution\([^\n]*), (True|False), (True|False), (True|False), (True|False)\)")


def traced_on(archive: bytes, device: str) -> bytes:
    """A TorchScript archive whose code creates its tensors on ``device``: a trace records the
    device of each tensor the model makes itself (EdgeNeXt's positional encoding: ``torch.zeros``
    and ``torch.arange`` on "cpu"), which ``map_location`` does not move. A trace also records
    each conv's cuDNN flags as constants (``allow_tf32=True``, ``benchmark=False`` when traced with
    the defaults), which the global flags then no longer reach: its convs would run in TF32
    whatever :func:`torch_baselines.fp32_without_tf32` says. They are set as the eager baseline
    runs: TF32 off, cuDNN's algorithm search on. Its code is text, so these constants are
    rewritten; the debug tables (source ranges of that text) are left out."""
    if device == "cpu":
        return archive
    src, out = zipfile.ZipFile(io.BytesIO(archive)), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith(".debug_pkl"):
                continue
            if "/code/" in info.filename and info.filename.endswith(".py"):
                data = data.replace(b'torch.device("cpu")', f'torch.device("{device}")'.encode())
                data = _TRACED_CONV.sub(rb"\1, True, \3, \4, False)", data)
            dst.writestr(info, data)
    return out.getvalue()
