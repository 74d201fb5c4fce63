"""paddle.optim: SGD, Adam, AdamW, LARS, LAMB (paddle/optim) and learning-rate schedules.

Schedules are functions of the step count: `schedule.apply(optimizer)` before each step sets the
optimizer's lr to schedule.lr_at(optimizer.step_count).
"""
from paddle._C.optim import (LAMB, LARS, SGD, Adam, AdamW, ConstantLR, CosineLR, LrSchedule,
                             Optimizer, StepLR, WarmupLR, scaled_lr)

__all__ = [
    "LAMB", "LARS", "SGD", "Adam", "AdamW", "ConstantLR", "CosineLR", "LrSchedule", "Optimizer",
    "StepLR", "WarmupLR", "scaled_lr",
]
