#!/usr/bin/python3
"""Trains a small residual CNN written in Python (paddle.nn.Module subclasses) on Fashion-MNIST,
data-parallel under the launcher, with step checkpoints that a restarted job resumes from.

    /usr/bin/python3 examples/resnet_fashion.py --epochs=1 --train-samples=12000
    paddlerun --nproc=2 --max-restarts=1 examples/resnet_fashion.py \\
        --checkpoint=/tmp/resnet.ckpt --checkpoint-every=50 --resume

The network is the ResNet of paddle/nn/models.h (conv-bn-relu stem, three stages of two basic
blocks with 16, 32 and 64 channels, global average pool, linear), but every block is a Python
class whose forward is Python; the convolutions, batch norms, additions and ReLUs it calls are
the C++ layers and kernels. --model=cpp trains nn.make_model("resnet") instead: the same weights
for the same --seed, so the two compute the same parameters and their step times show what the
Python front end costs.

With --checkpoint, rank 0 saves the model (parameters and batch-norm statistics), the optimizer
and the position (epoch, step within the epoch) every --checkpoint-every steps and after every
epoch (paddle.save: atomic, so a killed job leaves the previous checkpoint whole). --resume
continues from the checkpoint when there is one and starts afresh otherwise, so the same command
line serves the first start and every restart; the resumed job sees the same batches as an
uninterrupted one and ends with the same parameters. Prints one line per epoch and a final JSON
line (param_hash over parameters and buffers); exits 1 below --min-accuracy.
"""
import argparse
import itertools
import json
import os
import sys
import time

import paddle
import paddle.distributed as dist
from paddle import nn
from paddle.nn import functional as F


class BasicBlock(nn.Module):
    """relu(bn(conv(relu(bn(conv(x))))) + shortcut(x)); the shortcut is a 1x1 conv + bn when
    the block changes the shape, else the input itself."""

    def __init__(self, in_channels, out_channels, stride, generator):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False,
                               generator=generator)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False,
                               generator=generator)
        self.bn2 = nn.BatchNorm2d(out_channels)
        reshapes = stride != 1 or in_channels != out_channels
        self.shortcut = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False,
                      generator=generator), nn.BatchNorm2d(out_channels)) if reshapes else None

    def forward(self, x):
        h = self.bn1(self.conv1(x)).relu()
        h = self.bn2(self.conv2(h))
        return (h + (x if self.shortcut is None else self.shortcut(x))).relu()


class ResNet(nn.Module):
    """A stem, stages of BasicBlocks (16, 32, 64 channels; 28x28 -> 14x14 -> 7x7), pool, linear.
    Weights are drawn in the order of make_model("resnet"), so Generator(seed) gives its weights."""

    def __init__(self, seed=1, widths=(16, 32, 64), blocks_per_stage=2, classes=10):
        super().__init__()
        init = nn.Generator(seed, 0)
        self.stem = nn.Sequential(
            nn.Conv2d(1, widths[0], 3, padding=1, bias=False, generator=init),
            nn.BatchNorm2d(widths[0]))
        blocks, channels = [], widths[0]
        for i, width in enumerate(widths):
            for j in range(blocks_per_stage):
                stride = 2 if i > 0 and j == 0 else 1
                blocks.append(BasicBlock(channels, width, stride, init))
                channels = width
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.GlobalAvgPool()
        self.fc = nn.Linear(channels, classes, generator=init)

    def forward(self, x):
        return self.fc(self.pool(self.blocks(self.stem(x).relu())))


def evaluate(model, images, labels, batch=500):
    correct = 0
    with paddle.no_grad():
        model.eval()
        for i in range(0, len(images), batch):
            logits = model(paddle.from_numpy(images[i:i + batch]))
            correct += int((logits.argmax(1).numpy() == labels[i:i + batch]).sum())
        model.train()
    return correct / len(images)


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="python", choices=["python", "cpp"],
                   help="python: the ResNet above; cpp: nn.make_model('resnet'), same weights")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=128, help="global batch")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train-samples", type=int, default=0, help="0: all 60000")
    p.add_argument("--test-samples", type=int, default=0, help="0: all 10000")
    p.add_argument("--max-steps", type=int, default=0,
                   help="stop after this many steps in all (0: run every epoch)")
    p.add_argument("--min-accuracy", type=float, default=0.0)
    p.add_argument("--checkpoint", default="", help="file saved every --checkpoint-every steps")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="steps between checkpoints (0: after every epoch only)")
    p.add_argument("--resume", action="store_true",
                   help="continue from --checkpoint if it exists, else start afresh")
    o = p.parse_args(argv)
    if o.resume and not o.checkpoint:
        p.error("--resume needs --checkpoint")
    return o


def main(argv):
    o = parse(argv)
    paddle.set_num_threads(o.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if o.batch % world:
        print(f"--batch={o.batch} is not divisible by the {world} workers", file=sys.stderr)
        return 2
    if world > 1:
        dist.init_process_group("native", init_method="env://")
    rank = dist.get_rank() if world > 1 else 0

    train = paddle.data.FashionMNIST("train")
    test = paddle.data.FashionMNIST("test")
    images, labels = train.images.numpy(), train.labels.numpy()
    if o.train_samples:
        images, labels = images[:o.train_samples], labels[:o.train_samples]
    test_images, test_labels = test.images.numpy(), test.labels.numpy()
    if o.test_samples:
        test_images, test_labels = test_images[:o.test_samples], test_labels[:o.test_samples]
    dataset = paddle.data.TensorDataset(images, labels)
    sampler = paddle.data.DistributedSampler(len(dataset), rank=rank, world_size=world,
                                             seed=o.seed)
    loader = paddle.data.DataLoader(dataset, batch_size=o.batch // world, sampler=sampler,
                                    drop_last=True)
    steps_per_epoch = len(dataset) // o.batch

    model = ResNet(o.seed) if o.model == "python" else nn.make_model("resnet", o.seed)
    ddp = dist.DistributedDataParallel(model) if world > 1 else None
    forward = ddp if ddp is not None else model
    opt = paddle.optim.SGD(model.parameters(), lr=o.lr, momentum=0.9)

    epoch, step = 0, 0  # the position: `step` batches of `epoch` are done
    if o.resume and os.path.exists(o.checkpoint):
        # Every rank reads the checkpoint: the replicas start identical again.
        state = paddle.load(o.checkpoint)
        model.load_state_dict(state["model"])
        paddle.optim.load_nested_state(opt, state["optim"])
        epoch, step = state["epoch"], state["step"]
        if rank == 0:
            print(f"resumed from {o.checkpoint} at epoch {epoch} step {step}", flush=True)

    def save(epoch, step):
        if rank == 0 and o.checkpoint:
            paddle.save({"model": model.state_dict(), "optim": paddle.optim.nested_state(opt),
                         "epoch": epoch, "step": step}, o.checkpoint)

    start = time.monotonic()
    done = epoch * steps_per_epoch + step  # steps taken, over all epochs
    out_of_steps = lambda: o.max_steps and done >= o.max_steps  # noqa: E731
    acc = None
    while epoch < o.epochs and not out_of_steps():
        t0, total, ran = time.monotonic(), 0.0, 0
        for x, y in itertools.islice(loader.epoch(epoch), step, None):
            opt.zero_grad()
            loss = F.cross_entropy(forward(x), y)
            loss.backward()  # with DDP: gradients averaged across ranks as it runs
            opt.step()
            total += loss.item()
            ran, step, done = ran + 1, step + 1, done + 1
            if out_of_steps():
                break
            if o.checkpoint_every and step % o.checkpoint_every == 0 and step < steps_per_epoch:
                save(epoch, step)
        seconds = time.monotonic() - t0
        if step < steps_per_epoch:  # stopped by --max-steps inside the epoch
            save(epoch, step)
            break
        epoch, step = epoch + 1, 0
        save(epoch, step)
        if rank == 0:
            acc = evaluate(model, test_images, test_labels)
            print(f"epoch {epoch - 1} loss {total / max(ran, 1):.4f} test_accuracy {acc:.4f} "
                  f"{ran * o.batch / seconds:.0f} samples/s", flush=True)
    if rank == 0 and (acc is None or step):
        acc = evaluate(model, test_images, test_labels)
    if rank == 0:
        print(json.dumps({"model": o.model, "epochs": o.epochs, "epoch": epoch, "step": step,
                          "steps": done, "test_accuracy": acc, "world_size": world,
                          "seconds": round(time.monotonic() - start, 2),
                          "param_hash": model.param_hash()}), flush=True)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0 and acc < o.min_accuracy:
        print(f"test accuracy {acc:.4f} is below --min-accuracy={o.min_accuracy}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
