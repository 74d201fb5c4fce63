#!/usr/bin/python3
"""Trains a Fashion-MNIST classifier from Python, on one process or data-parallel on many: the
Python twin of examples/fashion_mnist.cc, with the same flags, the same per-epoch lines and the
same last-line JSON (epoch, train_loss, test_accuracy, samples_per_s, epoch_time_s, world_size,
comm_wait_fraction, optimizer_state_bytes, peak_rss_mb, param_hash). Given the same flags and thread count it computes the same
parameters as the C++ example, bit for bit (compare param_hash).

    /usr/bin/python3 examples/fashion_mnist.py --model=cnn --epochs=3 --threads=2
    bazel run -c opt //tools:launch -- --nproc=2 /usr/bin/python3 examples/fashion_mnist.py

Started by the launcher (WORLD_SIZE set) it joins the group through env://, shares each step's
global --batch over the workers (unevenly where their number does not divide it), shards the data
with a DistributedSampler and averages gradients with DDP (or, with --shard-optimizer, by the
reduce-scatter of a ZeroRedundancyOptimizer); rank 0 prints and evaluates. Checkpointing (--checkpoint-dir, --resume) is the C++ example's only.

With --elastic (under `paddlerun --nproc=N --min-nproc=M`) workers may die, leave on SIGTERM or
join while the job runs (paddle.distributed.elastic; the C++ example's --elastic, step for step):
the global batch stays --batch at any world size, the state is committed in memory every
--commit-every steps, and the JSON line adds membership_changes and recovery_s_max.

    paddlerun --nproc=4 --min-nproc=2 --max-restarts=3 /usr/bin/python3 examples/fashion_mnist.py \
        --elastic --model=mlp
"""
import argparse
import json
import resource
import os
import sys
import time

import numpy as np

import paddle
import paddle.distributed as dist
from paddle import nn, optim, telemetry
from paddle.distributed import elastic

DEFAULT_LR = {"sgd": 0.05, "adam": 1e-3, "lars": 2.0, "lamb": 4e-3}
DEFAULT_WD = {"sgd": 0.0, "adam": 0.0, "lars": 5e-4, "lamb": 0.01}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="cnn", choices=["mlp", "cnn", "resnet"])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=128, help="global batch")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--optimizer", default="sgd", choices=sorted(DEFAULT_LR))
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=None)
    p.add_argument("--warmup-epochs", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data-dir", default=paddle.data.DEFAULT_ROOT)
    p.add_argument("--train-samples", type=int, default=0)
    p.add_argument("--test-samples", type=int, default=0)
    p.add_argument("--backend", default="native", choices=["native", "gloo"])
    p.add_argument("--bucket-cap-mb", type=float, default=1.0)
    p.add_argument("--first-bucket-mb", type=float, default=1.0)
    p.add_argument("--compression", default="none", choices=["none", "fp16", "bf16"])
    p.add_argument("--no-sync", action="store_true")
    p.add_argument("--shard-optimizer", action="store_true",
                   help="keep 1/N of the optimizer state per worker (ZeRO-1): gradients "
                        "reduce-scattered, parameters all-gathered")
    p.add_argument("--local-sgd", type=int, default=0, metavar="H",
                   help="average parameters every H steps instead of gradients every step")
    p.add_argument("--local-sgd-warmup", type=int, default=0, metavar="N",
                   help="--local-sgd: N synchronous steps first (post-local SGD)")
    p.add_argument("--outer-momentum", type=float, default=0.0,
                   help="--local-sgd: global momentum on the averages (SlowMo)")
    p.add_argument("--elastic", action="store_true",
                   help="workers may leave and join (paddlerun --min-nproc)")
    p.add_argument("--commit-every", type=int, default=10,
                   help="--elastic: steps between in-memory commits")
    o = p.parse_args(argv)
    if o.commit_every < 1:
        p.error(f"--commit-every must be at least 1, got {o.commit_every}")
    if o.local_sgd < 0 or o.local_sgd_warmup < 0 or not 0 <= o.outer_momentum < 1:
        p.error("--local-sgd and --local-sgd-warmup must be >= 0 and --outer-momentum in [0, 1)")
    return o


def make_optimizer(o, params, shard=False):
    """--optimizer's rule; with `shard`, wrapped in a ZeroRedundancyOptimizer."""
    kwargs = {"lr": o.lr if o.lr is not None else DEFAULT_LR[o.optimizer],
              "weight_decay": o.weight_decay if o.weight_decay is not None
              else DEFAULT_WD[o.optimizer]}
    if o.optimizer in ("sgd", "lars"):
        kwargs["momentum"] = o.momentum
    rule = {"sgd": optim.SGD, "adam": optim.Adam, "lars": optim.LARS, "lamb": optim.LAMB}
    if shard:
        return dist.ZeroRedundancyOptimizer(params, rule[o.optimizer], **kwargs)
    return rule[o.optimizer](params, **kwargs)


def peak_rss_mb():
    """This process's peak resident set so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def evaluate(model, test):
    model.eval()
    images, labels = test.images.numpy(), test.labels.numpy()
    correct = 0
    with paddle.no_grad():
        for start in range(0, len(labels), 1000):
            logits = model(paddle.from_numpy(images[start:start + 1000])).numpy()
            correct += int((logits.argmax(axis=1) == labels[start:start + 1000]).sum())
    model.train()
    return correct / len(labels) if len(labels) else 0.0


def launched():
    env = os.environ
    return "WORLD_SIZE" in env or ("MASTER_ADDR" in env and any(
        k in env for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")))


def train_elastic(o, train, test):
    """One worker of an elastic job: the C++ example's --elastic loop (fashion_mnist_elastic.cc)."""
    group = elastic.ElasticGroup(backend=o.backend)
    if o.batch < group.max_size:
        sys.exit(f"fashion_mnist: --batch={o.batch} (the global batch) is smaller than the "
                 f"{group.max_size} workers the job may have")
    dropout = nn.Generator(o.seed, 1 + int(os.environ.get("RANK", "0")))
    model = nn.make_model(o.model, o.seed, dropout)
    opt = make_optimizer(o, model.parameters())
    state = elastic.State(model, opt, extras=["rng/dropout_offset"])
    images, labels = train.images.numpy(), train.labels.numpy()
    n = len(labels)
    steps_per_epoch = elastic.steps_per_epoch(n, o.batch)
    schedule = optim.WarmupLR(optim.CosineLR(opt.lr, max(steps_per_epoch * o.epochs, 1)),
                              round(o.warmup_epochs * steps_per_epoch), 0.1)
    cross_entropy = nn.functional.cross_entropy
    order = {"epoch": -1, "order": None}
    out = {"json": None}

    def generation(pg):
        leader = pg.rank == 0
        dropout.offset = state["rng/dropout_offset"]
        ddp = dist.DistributedDataParallel(model, bucket_cap_mb=o.bucket_cap_mb,
                                           first_bucket_mb=o.first_bucket_mb, group=pg)
        if leader:
            print(f"elastic: generation {group.generation}: world size {pg.size}, from step "
                  f"{state.step} (epoch {state.epoch + 1}, sample {state.samples}), rank 0 is "
                  f"pid {os.getpid()}", flush=True)
        epoch_start = time.monotonic()
        while state.epoch < o.epochs:
            if order["epoch"] != state.epoch:
                order["epoch"], order["order"] = state.epoch, elastic.epoch_order(n, o.seed,
                                                                                  state.epoch)
            global_size, begin, count = elastic.share_of_global_batch(n, state.samples, o.batch,
                                                                      pg.rank, pg.size)
            first = state.samples + begin
            rows = np.asarray(order["order"][first:first + count], dtype=np.int64)
            opt.lr = schedule.lr_at(state.step)
            opt.zero_grad()
            loss = cross_entropy(ddp(paddle.from_numpy(images[rows])),
                                 paddle.from_numpy(labels[rows]))
            # DDP averages over ranks; weighting by the share makes it the global batch's mean.
            (loss * (count * pg.size / global_size)).backward()
            opt.step()
            change = group.agree_on_change(value=loss.item() * count / global_size)
            state.step += 1
            state.samples += global_size
            state.loss_sum += change.total
            state.loss_count += 1
            state["rng/dropout_offset"] = dropout.offset
            recovered = elastic.step_done()
            if leader and recovered is not None:
                print(f"elastic: recovered at step {state.step}, world size {pg.size}, "
                      f"generation {group.generation}, {recovered:.3f} s after the failure",
                      flush=True)
            epoch_end = state.samples >= n
            if epoch_end:
                train_loss = state.loss_sum / max(state.loss_count, 1)
                state.epoch += 1
                state.samples, state.loss_sum, state.loss_count = 0, 0.0, 0
                if leader:
                    accuracy = evaluate(model, test)
                    print(f"epoch {state.epoch}/{o.epochs}  train_loss {train_loss:.4f}  "
                          f"test_accuracy {accuracy:.4f}  world {pg.size}  epoch_time "
                          f"{time.monotonic() - epoch_start:.2f}s", flush=True)
                    out["json"] = {"epoch": state.epoch, "steps": state.step,
                                   "train_loss": round(train_loss, 6),
                                   "test_accuracy": round(accuracy, 4), "world_size": pg.size,
                                   "param_hash": model.param_hash()}
                epoch_start = time.monotonic()
            if state.step % o.commit_every == 0 or change.any or epoch_end:
                state.commit()
            if change.any:
                if leader:
                    print(f"elastic: membership change after step {state.step}: "
                          f"{change.joiners} joining, {len(change.leavers)} leaving", flush=True)
                return change
        return True

    stats = elastic.run(group, state, generation)
    if out["json"] is not None and group.rank == 0 and not stats["left"]:
        out["json"].update(membership_changes=stats["membership_changes"],
                           recovery_s_max=round(stats["recovery_s_max"], 3))
        print(json.dumps(out["json"]), flush=True)
    return 0


def main(argv):
    o = parse_args(argv)
    paddle.set_num_threads(o.threads)
    if o.shard_optimizer and (o.no_sync or o.local_sgd > 0 or o.elastic):
        sys.exit("fashion_mnist: --shard-optimizer goes without --no-sync, --local-sgd and "
                 "--elastic")
    if o.elastic:
        return train_elastic(o, paddle.data.FashionMNIST("train", o.data_dir).head(
            o.train_samples), paddle.data.FashionMNIST("test", o.data_dir).head(o.test_samples))
    rank, world = 0, 1
    if launched():
        dist.init_process_group(o.backend, init_method="env://")
        rank, world = dist.get_rank(), dist.get_world_size()
        if o.batch < world:
            sys.exit(f"fashion_mnist: --batch={o.batch} (the global batch) is smaller than the "
                     f"{world} workers: each reads at least one sample per step")
    leader = rank == 0
    train = paddle.data.FashionMNIST("train", o.data_dir).head(o.train_samples)
    test = paddle.data.FashionMNIST("test", o.data_dir).head(o.test_samples)

    # Weights from the seed (identical replicas); dropout masks from a stream per rank.
    dropout = nn.Generator(o.seed, 1 + rank)
    model = nn.make_model(o.model, o.seed, dropout)
    sharded = o.shard_optimizer and launched()  # one process holds all state anyway
    opt = make_optimizer(o, model.parameters(), shard=sharded)
    # Any world size: the ranks share each step's --batch samples, unevenly where the world size
    # does not divide it (Note [Uneven shares] in paddle/data/distributed_sampler.h).
    sampler = paddle.data.DistributedSampler(len(train), rank, world, o.seed, global_batch=o.batch)
    local_batch = sampler.local_batch
    ddp = None
    if (world > 1 or launched()) and not sharded:  # the sharded optimizer replaces DDP
        ddp = dist.DistributedDataParallel(model, bucket_cap_mb=o.bucket_cap_mb,
                                           first_bucket_mb=o.first_bucket_mb,
                                           compression=o.compression)
        if o.no_sync:
            ddp.set_sync(False)
    local_sgd = None
    if ddp and o.local_sgd > 0:
        local_sgd = dist.LocalSGD(model, period=o.local_sgd, warmup_steps=o.local_sgd_warmup,
                                  outer_momentum=o.outer_momentum, ddp=ddp)
    loader = paddle.data.DataLoader(train, local_batch, sampler=sampler)
    steps_per_epoch = len(loader)
    total_steps = steps_per_epoch * o.epochs
    peak_lr = opt.lr
    schedule = optim.WarmupLR(optim.CosineLR(peak_lr, max(total_steps, 1)),
                              round(o.warmup_epochs * steps_per_epoch), 0.1)
    if leader:
        print(f"fashion_mnist: model {o.model} ({model.num_parameters()} parameters), optimizer "
              f"{o.optimizer}, lr {peak_lr:g}, batch {o.batch}, {world} workers x {o.threads} "
              f"threads, {len(train)} train / {len(test)} test samples")
        if ddp:
            print(ddp.describe_layout(), end="")
        sys.stdout.flush()
    forward = ddp if ddp else model
    cross_entropy = nn.functional.cross_entropy
    step = 0
    last_json = None
    for epoch in range(o.epochs):
        loss_sum, loss_count, samples, steps = 0.0, 0, 0, 0
        wait_before = ddp.comm_wait_seconds() if ddp else 0.0
        start = last_report = time.monotonic()
        for images, labels in loader.epoch(epoch):
            step_start = time.monotonic()
            opt.lr = schedule.lr_at(opt.step_count)
            opt.zero_grad()
            loss = cross_entropy(forward(images), labels)
            # Weighted by this rank's share of --batch: 1 in a full step of an even split.
            weight = images.shape[0] * world / o.batch
            weighted = loss * weight if weight != 1.0 else loss
            if ddp:
                ddp.backward(weighted)
            else:
                weighted.backward()
            opt.step()
            if local_sgd:
                local_sgd.after_step()
            loss_sum += loss.item() * images.shape[0]  # the epoch's mean over its samples
            loss_count += images.shape[0]
            step += 1
            # paddlerun --dashboard (docs/observability.md)
            telemetry.record_step(time.monotonic() - step_start, images.shape[0], ddp=ddp)
            telemetry.set_loss(loss.item())
            samples += min(o.batch, sampler.total_size - steps * o.batch)  # the step's global batch
            steps += 1
            now = time.monotonic()
            if leader and now - last_report >= 5:  # the C++ example's non-terminal progress
                last_report = now
                done = steps
                print(f"  step {done}/{steps_per_epoch}  samples/s {samples / (now - start):.0f}"
                      f"  ETA {(now - start) * (steps_per_epoch - done) / done:.0f}s",
                      flush=True)
        seconds = time.monotonic() - start
        wait = ddp.comm_wait_seconds() - wait_before if ddp else 0.0
        wait_fraction = wait / seconds if seconds > 0 else 0.0
        totals = np.array([loss_sum, loss_count], np.float64)
        if dist.is_initialized():
            dist.all_reduce(totals)
        train_loss = totals[0] / totals[1] if totals[1] > 0 else 0.0
        rate = samples / seconds if seconds > 0 else 0.0
        if not leader:
            continue
        accuracy = evaluate(model, test)
        state_bytes = opt.optimizer_state_bytes if sharded else opt.state_bytes
        comm = f"  comm_wait {100 * wait_fraction:.1f}%" if ddp else ""
        print(f"epoch {epoch + 1}/{o.epochs}  train_loss {train_loss:.4f}  test_accuracy "
              f"{accuracy:.4f}  samples/s {rate:.0f}  epoch_time {seconds:.2f}s{comm}", flush=True)
        last_json = (f'{{"epoch": {epoch + 1}, "train_loss": {train_loss:.6f}, "test_accuracy": '
                     f'{accuracy:.4f}, "samples_per_s": {rate:.1f}, "epoch_time_s": '
                     f'{seconds:.3f}, "world_size": {world}, "comm_wait_fraction": '
                     f'{wait_fraction:.4f}, "optimizer_state_bytes": {state_bytes}, "peak_rss_mb": '
                     f'{peak_rss_mb():.1f}, "param_hash": "{model.param_hash()}"}}')
    if local_sgd:  # one model again on every rank (per-epoch figures are rank 0's replica)
        local_sgd.synchronize()
    if dist.is_initialized():
        dist.destroy_process_group()
    if leader:
        if last_json is None:
            last_json = json.dumps({"epoch": o.epochs, "param_hash": model.param_hash()})
        print(last_json, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
