"""PyTorch baselines on an NVIDIA GPU: eager and CUDA-graph times of one model, fp32, TF32 off.

``graph_timings(model, shape, repeat, rival)`` times a ``torch.nn.Module`` (eager timm, a
TorchScript trace, a built-in): eager ms (CUDA events around one call), the captured CUDA graph's
replay ms, and its wall time measured the way ours is (``common.wall_ms``): the input copied in
from pinned memory, the graph replayed, the output copied out, one wait. ``rival`` (a callable:
one run of ours, its wall ms) is timed in interleaved blocks with the graph's wall: ``repeat``
blocks of ``BLOCK_RUNS`` runs of each, which goes first alternating, so a drift of the machine hits
both alike. Blocks, not single alternating runs (stop 48): run by run, ours' median wall came out
up to 0.6 ms above the same model's wall timed alone (SwiftFormer 1.46 against 0.86 ms), as if each
run right after the other API's work paid for the GPU's switch between the CUDA and the OpenCL
context; in a block only its first run can, and the median leaves it out, for both sides alike.
torch is imported only when called.
"""

from __future__ import annotations

import statistics
import time

#: Runs of ours and of the graph per interleaved block (see the module doc).
BLOCK_RUNS = 5


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def fp32_without_tf32() -> None:
    """cuDNN and cuBLAS in true fp32 (no TF32), cuDNN's algorithm search on."""
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True


def _timed(fn, repeat: int) -> float:
    """Median ms of ``fn()`` by CUDA events."""
    import torch

    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def replayed_call_ms(fn, calls: int = 20, repeat: int = 30) -> float:
    """Median ms of one ``fn()`` on the GPU: ``calls`` of them captured in one CUDA graph, its replay
    timed by CUDA events and divided by ``calls``. Events around a single eager call time the host's
    dispatch too (~20 us, more than a small GEMM's kernel): a replay has no host work between kernels."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    return _timed(graph.replay, repeat) / calls


def _first_tensor(y):
    """A model's output tensor (timm returns one; a trace of a dict/tuple model its first)."""
    return y if hasattr(y, "shape") else next(iter(y.values() if isinstance(y, dict) else y))


def graph_timings(model, shape, repeat: int, rival=None, warmup: int = 5, block_runs: int = BLOCK_RUNS) -> dict:
    """{"eager_ms", "graph_ms", "graph_wall_ms"[, "ours_wall_paired_ms"]} of ``model`` on a random
    input of ``shape`` on the current CUDA device (see the module doc), with each side's median wall
    by a run's place in its block ("..._by_run_ms": where the switch between the two APIs costs),
    plus "output": the eager output on the CPU (to compare two baselines of one model)."""
    import torch

    fp32_without_tf32()
    x = torch.randn(*shape, device="cuda")
    with torch.no_grad():
        for _ in range(warmup):  # cuDNN's search; a trace's profiling runs and fusion
            model(x)
        eager = _timed(lambda: model(x), repeat)
        output = _first_tensor(model(x)).float().cpu()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                model(x)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = _first_tensor(model(x))
        replay = _timed(graph.replay, repeat)
        host_x, host_y = torch.randn(*shape).pin_memory(), torch.empty(tuple(y.shape), dtype=y.dtype).pin_memory()

        def graph_wall():
            start = time.perf_counter()
            x.copy_(host_x, non_blocking=True)
            graph.replay()
            host_y.copy_(y, non_blocking=True)
            torch.cuda.synchronize()
            return (time.perf_counter() - start) * 1e3

        walls, rivals = interleaved_blocks(graph_wall, rival, repeat, block_runs)
    paired = {"ours_wall_paired_ms": statistics.median(rivals), "paired_runs": len(rivals), "block_runs": block_runs,
              "ours_wall_by_run_ms": by_place_in_block(rivals, block_runs)} if rivals else {}
    return {"eager_ms": eager, "graph_ms": replay, "graph_wall_ms": statistics.median(walls),
            "graph_wall_by_run_ms": by_place_in_block(walls, block_runs), **paired, "output": output}


def interleaved_blocks(first, second, blocks: int, runs: int = BLOCK_RUNS) -> tuple[list, list]:
    """The values of ``runs`` calls of ``first`` and then of ``second`` (each returns a time) per
    block, ``blocks`` blocks, the two swapping places every block; ``second`` may be None."""
    a, b = [], []
    for block in range(blocks):
        order = [(first, a), (second, b)] if block % 2 == 0 else [(second, b), (first, a)]
        for fn, values in order:
            if fn is not None:
                values.extend(fn() for _ in range(runs))
    return a, b


def by_place_in_block(values: list, runs: int) -> list:
    """The median of the first run of every block, of the second, ...: ``values`` as
    ``interleaved_blocks`` returns them, ``runs`` per block."""
    return [statistics.median(values[place::runs]) for place in range(min(runs, len(values)))]


def versions() -> dict:
    import torch

    return {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version()}
