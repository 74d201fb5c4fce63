"""torch.distributed backend "paddle": PyTorch collectives on Paddle Collective's native engine.

    import paddle.torch  # registers the backend
    torch.distributed.init_process_group(backend="paddle")

Every init method torch supports (env://, tcp://, file://, torchrun) works unchanged: the
backend rendezvouses through the store torch hands it. See docs/torch.md for what is supported.
"""
import torch.distributed as _dist

from paddle.torch._C import ProcessGroupPaddle, create

__all__ = ["ProcessGroupPaddle", "BACKEND"]

BACKEND = "paddle"

# Importing twice (or after another library registered the name) must not fail.
if BACKEND.upper() not in _dist.Backend._plugins:
    _dist.Backend.register_backend(BACKEND, create)
