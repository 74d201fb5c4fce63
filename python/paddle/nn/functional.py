"""paddle.nn.functional: differentiable operations (paddle/nn/functional.h, and the tensor
operations of paddle/_tensor_ops.py)."""
from paddle._C.nn.functional import (add, avg_pool2d, conv2d, cross_entropy, dropout, embedding,
                                     flatten, gelu, linear, max_pool2d, mul, relu, reshape)
from paddle._tensor_ops import log_softmax, matmul, sigmoid, softmax, tanh

__all__ = [
    "add", "avg_pool2d", "conv2d", "cross_entropy", "dropout", "embedding", "flatten", "gelu",
    "linear", "log_softmax", "matmul", "max_pool2d", "mul", "relu", "reshape", "sigmoid",
    "softmax", "tanh",
]
