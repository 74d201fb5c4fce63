"""Record shards of the first Fashion-MNIST training samples, for the --data=tasks job tests.

make_shards(tool, workdir, samples) writes the first `samples` training images and labels as
numpy files in `workdir`, then has tools/make-shards (`tool`) cut them into 4 shards (sample id =
row) under workdir/shards, and returns that folder."""
import gzip
import os
import subprocess

import numpy as np

FASHION = "/usr/share/datasets/fashion-mnist"


def _read(name, header):
    with gzip.open(os.path.join(FASHION, name)) as f:
        return np.frombuffer(f.read()[header:], np.uint8)


def make_shards(tool, workdir, samples):
    images = _read("train-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)[:samples]
    labels = _read("train-labels-idx1-ubyte.gz", 8)[:samples]
    np.save(os.path.join(workdir, "label.npy"), labels)
    np.save(os.path.join(workdir, "image.npy"), images)
    out = os.path.join(workdir, "shards")
    os.mkdir(out)
    subprocess.run([tool, f"--out={out}", f"--npy={workdir}/label.npy,{workdir}/image.npy",
                    f"--records-per-shard={samples // 4 + 1}"], check=True,
                   stdout=subprocess.DEVNULL)
    return out
