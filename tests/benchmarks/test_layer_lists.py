"""benchmarks/layers.py: the hand-written layer lists the conv benchmarks time."""

from helpers.benchmarks import benchmark


def test_benchmark_layer_lists_match_torchvision():
    """Layer counts and multiply-adds of the hand-written lists equal torchvision's models
    (ResNet-50: 53 convs, 4.087 GMACs without the FC; MobileNetV2: 52 convs, 299.5 MMACs)."""
    layers = benchmark("layers")
    for model, expected in layers.EXPECTED.items():
        assert layers.totals(model) == expected
        keys = [(r.data_shape, r.weight_shape, r.strides, r.padding, r.groups) for r in layers.MODELS[model]]
        assert len(set(keys)) == len(keys), "a layer is listed twice instead of counted"
