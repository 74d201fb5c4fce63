"""Paddle Collective: data-parallel deep learning without a parameter server.

This package is the Python face of the C++ framework. Today it exposes the core's dtype
conversions and random streams; tensors, autograd, layers and paddle.distributed are added as the
C++ pieces land.
"""
from paddle import _C
from paddle._C import (bfloat16_to_float, convert_path, dtype_size, float_to_bfloat16,
                       float_to_half, half_to_float, philox_uniform)

__all__ = [
    "bfloat16_to_float", "convert_path", "dtype_size", "float_to_bfloat16", "float_to_half",
    "half_to_float", "philox_uniform",
]
