"""Collective and data-parallel step simulator (tools/simulate): a LogGP-style cost model per
transport fitted from bench:collectives JSON, step-by-step schedules of the native engine's
allreduce algorithms with contention on shared host links, and a model of the reducer's
bucketed overlap. docs/simulator.md describes the model and its measured error."""
