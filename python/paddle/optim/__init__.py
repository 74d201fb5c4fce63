"""paddle.optim: SGD, Adam, AdamW, LARS, LAMB (paddle/optim) and learning-rate schedules.

Schedules are functions of the step count: `schedule.apply(optimizer)` before each step sets the
optimizer's lr to schedule.lr_at(optimizer.step_count).
"""
from paddle._C.optim import (LAMB, LARS, SGD, Adam, AdamW, ConstantLR, CosineLR, LrSchedule,
                             Optimizer, StepLR, WarmupLR, scaled_lr)

__all__ = [
    "LAMB", "LARS", "SGD", "Adam", "AdamW", "ConstantLR", "CosineLR", "LrSchedule", "Optimizer",
    "StepLR", "WarmupLR", "scaled_lr", "nested_state", "load_nested_state",
]


def nested_state(optimizer):
    """optimizer.state_dict() with its "a/b" keys nested as {"a": {"b": ...}}: the form
    paddle.save takes (its keys may not hold "/") and paddle.load gives back."""
    out = {}
    for key, value in optimizer.state_dict().items():
        *parents, leaf = key.split("/")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def load_nested_state(optimizer, tree):
    """Loads what nested_state gave, after a paddle.save / paddle.load round trip."""
    def flatten(node, prefix):
        for key, value in node.items():
            path = f"{prefix}/{key}" if prefix else key
            if isinstance(value, dict):
                yield from flatten(value, path)
            else:
                yield path, value
    optimizer.load_state_dict(dict(flatten(tree, "")))
