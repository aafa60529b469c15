"""MobileViT's patch unfold and fold on NCHW4c tensors: a permutation of pixels, channels kept.

MobileViT (v1 and v2) cuts a ``[N, C, H, W]`` map into ``nh x nw`` patches of ``ph x pw``
pixels and lays it out as ``[N, C, P, T]``: ``P = ph * pw`` pixels per patch (rows), ``T = nh *
nw`` patches (columns), so attention runs over the patches of one patch pixel. Exported as

    unfold: reshape [N, C, nh, ph, nw, pw] -> transpose (0, 1, 3, 5, 2, 4) -> reshape [N, C, P, T]
    fold:   reshape [N, C, ph, pw, nh, nw] -> transpose (0, 1, 4, 2, 5, 3) -> reshape [N, C, H, W]

Both keep the channel axis, so in NCHW4c each output pixel is one input pixel (all 4 lanes):
one work item per output pixel, one texture read, one write. Padded lanes move with their
pixel (zero in, zero out).
"""

from __future__ import annotations

from tvm.script import tirx as T

from ._common import LANES, TEXTURE, check_dtype, check_positive, check_scope, load_pixel, nchw4c, pixel_grid, pixel_launch, store_pixel


def patch_shapes(shape, ph: int, pw: int) -> tuple[tuple, tuple]:
    """(image, patches) NCHW4c shapes: ``[N, C4, H, W, 4]`` and ``[N, C4, ph * pw, nh * nw, 4]``."""
    shape = nchw4c(shape)
    n, c4, h, w, _ = shape
    check_positive(N=n, C4=c4, H=h, W=w, ph=ph, pw=pw)
    if h % ph or w % pw:
        raise ValueError(f"patches of {ph}x{pw} do not tile an {h}x{w} map (MobileViT resizes it first)")
    return shape, (n, c4, ph * pw, (h // ph) * (w // pw), LANES)


def patch_unfold(shape, ph: int, pw: int, inverse: bool = False, dtype: str = "float32", scope: str = TEXTURE):
    """The image ``shape`` (NCHW4c ``[N, C4, H, W, 4]``) cut into ``ph x pw`` patches as
    ``[N, C4, ph * pw, nh * nw, 4]`` (patch pixel ``i * pw + j`` of patch ``a * nw + b`` is
    image pixel ``(a * ph + i, b * pw + j)``); ``inverse``: the fold, patches back to the image."""
    image, patches = patch_shapes(shape, ph, pw)
    check_dtype(dtype)
    check_scope(scope)
    n, c4, h, w, _ = image
    nw = w // pw
    src_shape, dst_shape = (patches, image) if inverse else (image, patches)
    rows, cols = dst_shape[2], dst_shape[3]
    g = pixel_grid(n * c4, rows, cols)

    # The input pixel (row, column) of output pixel (y, x).
    if inverse:  # image pixel (y, x) is pixel (y % ph, x % pw) of patch (y // ph, x // pw)
        def src_row(y, x):
            return (y % ph) * pw + x % pw

        def src_col(y, x):
            return (y // ph) * nw + x // pw
    else:  # patch pixel p of patch t is image pixel (t // nw * ph + p // pw, t % nw * pw + p % pw)
        def src_row(p, t):
            return (t // nw) * ph + p // pw

        def src_col(p, t):
            return (t % nw) * pw + p % pw

    launch = pixel_launch()

    @T.macro
    def per_pixel(X, Y, vz, vh, vw):
        px = T.sblock_alloc_buffer((4,), dtype, scope="local")
        load_pixel(px, X, vz // c4, vz % c4, src_row(vh, vw), src_col(vh, vw))
        store_pixel(Y, vz // c4, vz % c4, vh, vw, px)

    @T.prim_func(s_tir=True)
    def func(x: T.handle, y: T.handle):
        T.func_attr({"global_symbol": "patch_fold" if inverse else "patch_unfold", "tirx.noalias": True})
        X = T.match_buffer(x, src_shape, dtype, scope=scope)
        Y = T.match_buffer(y, dst_shape, dtype, scope=scope)
        launch(g, rows, cols, "pixel", lambda vz, vh, vw: per_pixel(X, Y, vz, vh, vw))

    return func


def patch_fold(shape, ph: int, pw: int, dtype: str = "float32", scope: str = TEXTURE):
    """The inverse of :func:`patch_unfold`: patches back to the image ``shape``."""
    return patch_unfold(shape, ph, pw, inverse=True, dtype=dtype, scope=scope)
