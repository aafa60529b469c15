"""The one table of activations (primfuncs.activation_table) against the textbook definitions.

The kernels, the float64 references and the graph's recognizer all evaluate the table's formulas,
so this is where a formula meets an independent definition: PyTorch's / ONNX's as written, in
float64, NaN and Inf included. Parameters travel: a non-default one changes the values, an unknown
one is refused by name.
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from primfuncs.activation_table import NAMES, NUMPY, TABLE, activation, numpy_activation
from tir_adreno import reference

erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # another form than the table's 1 / (1 + exp(-x))


#: The definitions as PyTorch / ONNX document them (params as keywords, defaults included).
TEXTBOOK = {
    "relu": lambda x: np.where(np.isnan(x) | (x > 0), x, 0.0),
    "relu6": lambda x: np.clip(x, 0.0, 6.0),
    "clip": lambda x, lo=0.0, hi=6.0: np.clip(x, lo, hi),
    "sigmoid": _sigmoid,
    "silu": lambda x: x * _sigmoid(x),
    "hardsigmoid": lambda x, alpha=1 / 6, beta=0.5: np.maximum(0.0, np.minimum(1.0, alpha * x + beta)),
    "hardswish": lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    "gelu": lambda x: 0.5 * x * (1.0 + erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))),
    "leaky_relu": lambda x, alpha=0.01: np.where(x >= 0, x, alpha * x),
}
PARAMS = {"clip": {"lo": -1.5, "hi": 2.25}, "hardsigmoid": {"alpha": 0.2, "beta": 0.5}, "leaky_relu": {"alpha": 0.3}}


def test_every_activation_has_a_definition_here():
    assert set(TEXTBOOK) == set(TABLE) and NAMES == (None, *TABLE)


@pytest.mark.parametrize("name", sorted(TABLE))
@given(values=st.lists(st.floats(-30, 30), min_size=1, max_size=50), with_params=st.booleans())
def test_table_matches_the_definition(name, values, with_params):
    x = np.concatenate([np.asarray(values), [-np.inf, np.inf, np.nan, 0.0, -3.0, 3.0, 6.0]])
    params = PARAMS.get(name, {}) if with_params else {}
    with np.errstate(over="ignore", invalid="ignore"):
        expected = TEXTBOOK[name](x, **params)
    got = numpy_activation(x, name, **params)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)  # NaN where the definition has NaN


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_a_parameter_changes_the_values(name):
    x = np.linspace(-5, 5, 101)
    assert not np.allclose(numpy_activation(x, name), numpy_activation(x, name, **PARAMS[name]))


def test_unknown_names_and_parameters_are_refused():
    with pytest.raises(ValueError, match="mish"):
        activation("mish")
    with pytest.raises(ValueError, match="'beta'"):
        numpy_activation(np.zeros(3), "leaky_relu", beta=1.0)
    with pytest.raises(ValueError, match="activation must be one of"):
        reference.activation(np.zeros(3), "mish")


def test_reference_reads_the_table():
    """reference.activation is the table's formula (clip's bounds as its positional arguments)."""
    x = np.linspace(-8, 8, 33)
    np.testing.assert_array_equal(reference.activation(x, "clip", -1.0, 2.0), TABLE["clip"](NUMPY, x, lo=-1.0, hi=2.0))
    np.testing.assert_array_equal(reference.activation(x, "leaky_relu", alpha=0.3), np.where(x < 0, 0.3 * x, x))


def test_kernel_formula_takes_parameters():
    """The TIR side of the same entry: a parametrized activation reaches the kernels through
    Epilogue.activation_params, an unknown one is refused when the Epilogue is made."""
    from primfuncs.epilogue import Epilogue, activate

    assert Epilogue(activation="leaky_relu", activation_params=(("alpha", 0.3),))
    with pytest.raises(ValueError, match="'gamma'"):
        Epilogue(activation="leaky_relu", activation_params=(("gamma", 0.3),))
    from tvm.script import tirx as T

    x = T.Var("x", "float32")
    assert "x * T.float32(0.25)" in str(activate(x, "leaky_relu", "float32", params=(("alpha", 0.25),)))
    assert "0.25" not in str(activate(x, "leaky_relu", "float32"))  # the default alpha
