"""paddle.nn: modules written in Python (Module, Parameter, Sequential, ModuleList, ModuleDict)
and the C++ layers and models (paddle/nn), which mix freely.

Layers draw their initial weights from `generator=` or, by default, from paddle.nn's default
generator, which paddle.manual_seed(seed) resets. Models: make_model("mlp"|"cnn"|"resnet", seed).
"""
from paddle._C.nn import (GELU, BatchNorm2d, Conv2d, Dropout, Embedding, Flatten, Generator,
                          GlobalAvgPool, Linear, MaxPool2d, ReLU, make_model)
from paddle.nn import functional
from paddle.nn.module import Module, ModuleDict, ModuleList, Parameter, Sequential

__all__ = [
    "GELU", "BatchNorm2d", "Conv2d", "Dropout", "Embedding", "Flatten", "Generator",
    "GlobalAvgPool", "Linear", "MaxPool2d", "Module", "ModuleDict", "ModuleList", "Parameter",
    "ReLU", "Sequential", "make_model", "functional", "default_generator",
]

_default = [Generator(0)]


def default_generator():
    """The generator layers use when none is given."""
    return _default[0]


def _reset_default_generator(seed):
    _default[0] = Generator(seed)
