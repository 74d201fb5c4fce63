"""paddle.nn.functional: differentiable operations (paddle/nn/functional.h)."""
from paddle._C import matmul
from paddle._C.nn.functional import (add, avg_pool2d, conv2d, cross_entropy, dropout, embedding,
                                     flatten, gelu, linear, max_pool2d, mul, relu, reshape)

__all__ = [
    "add", "avg_pool2d", "conv2d", "cross_entropy", "dropout", "embedding", "flatten", "gelu",
    "linear", "matmul", "max_pool2d", "mul", "relu", "reshape",
]
