"""paddle.distributed metrics across real processes: AucHistogram and ClassificationTotals summed
over 3 ranks with uneven shards, against AUC computed exactly by sorting (scikit-learn's
definition: Mann-Whitney with ties counting one half) and sample-weighted accuracy and loss.

The test starts this file as each rank: `metrics_test.py worker RANK WORLD PORT`.
"""
import os
import socket
import subprocess
import sys

import numpy as np

WORLD = 3


def shard(rank):
    """Rank r's predictions: 50 + 200 r samples, scores on a 1/100 grid (many exact ties)."""
    rng = np.random.default_rng(rank)
    n = 50 + 200 * rank
    labels = rng.integers(0, 2, n)
    scores = np.clip(np.round(0.5 * rng.random(n) + 0.3 * labels, 2), 0, 1).astype(np.float32)
    return scores, labels


def exact_auc(scores, labels):
    order = np.argsort(scores, kind="stable")
    s, y = scores[order], labels[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        ranks[i:j] = (i + 1 + j) / 2
        i = j
    p = y.sum()
    n = len(y) - p
    return (ranks[y == 1].sum() - p * (p + 1) / 2) / (p * n)


def worker(rank, world, port):
    import paddle.distributed as dist
    dist.init_process_group("native", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=60)
    scores, labels = shard(rank)
    h = dist.AucHistogram()
    h.add(scores, labels)
    dist.sum_over_ranks(h)
    everything = [shard(r) for r in range(world)]
    want = exact_auc(np.concatenate([s for s, _ in everything]),
                     np.concatenate([y for _, y in everything]))
    assert h.positives + h.negatives == sum(len(y) for _, y in everything)
    assert abs(h.auc() - want) <= h.error_bound() + 1e-12, (h.auc(), want, h.error_bound())
    assert abs(h.auc() - want) < 1e-12  # grid scores: only exact ties share a bucket

    t = dist.ClassificationTotals()
    t.add(samples=len(labels), correct=int(labels.sum()), loss_sum=float(rank + 1) * len(labels))
    dist.sum_over_ranks(t)
    total = sum(len(y) for _, y in everything)
    assert t.samples == total
    assert t.accuracy() == sum(int(y.sum()) for _, y in everything) / total
    assert abs(t.mean_loss() - sum((r + 1) * len(y) for r, (_, y) in enumerate(everything)) / total) < 1e-12

    for bad, what in [(lambda: h.add(np.array([1.5], np.float32), np.array([1])), "score 0 is 1.5"),
                      (lambda: dist.AucHistogram().auc(), "both classes"),
                      (lambda: dist.AucHistogram(0), "buckets must be")]:
        try:
            bad()
            raise AssertionError(f"accepted: {what}")
        except (ValueError, RuntimeError) as e:
            assert what in str(e), str(e)
    dist.barrier()
    dist.destroy_process_group()
    print("OK auc", h.auc())


def test_metrics_three_ranks():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", str(r),
                               str(WORLD), port], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for r in range(WORLD)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=90) + (p.returncode,))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError("ranks still running after 90 s (a hang)")
    for r, (out, err, code) in enumerate(outs):
        assert code == 0 and "OK auc" in out, f"rank {r} exited {code}\n{out}\n{err}"
    assert len({out.split("OK auc")[1] for out, _, _ in outs}) == 1  # the same AUC everywhere


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "worker":
    worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
