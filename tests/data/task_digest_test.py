#!/usr/bin/python3
"""fashion_mnist --sample-digest (Note [Sample digest] in examples/fashion_mnist_tasks.cc): every
sample exactly once per epoch in a static 2-worker --data=tasks job, checked without the ledger.

  a. No --checkpoint-dir, no --sample-ledger: the commit without an allgather (Note [Static task
     positions], step 1, in examples/fashion_mnist_task_group.cc). Per epoch, the ranks' counts
     add up to N and their digests (mod 2^64) to the digest of {0..N-1}.
  b. The same job with --sample-ledger (the commit's allgather): as (a), and each rank's count
     and digest are those of the ledger's ids of the steps tagged with that rank.
  c. The check can fail: ids with one dropped and another repeated (the count unchanged) do not
     pass it.
  d. --sample-digest without --data=tasks is refused, naming the flag.
  e. Bad shards end the job with an error naming the shard and byte offset, before anything is
     trained on them: one flipped pixel byte (the record's CRC) - the job fails and no committed
     step holds that sample - and a shard cut short (its index names more bytes), which fails
     the first task read from it, before any of its records (task_feed_test checks the "before").

usage: task_digest_test.py LAUNCH MAKE_SHARDS
"""
import json
import os
import re
import shutil
import struct
import sys
import tempfile
import time
import unittest

from tests.data.fashion_shards import make_shards
from tests.testing.launched_job import LaunchedJob

LAUNCH, MAKE_SHARDS = sys.argv[1:3]
SAMPLES, EPOCHS, RANKS = 6000, 2, 2
RECORDS_PER_TASK = 150  # 40 tasks an epoch: about 20 per rank
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
JOB = [LAUNCH, f"--nproc={RANKS}", "//examples:fashion_mnist", "--model=mlp", f"--epochs={EPOCHS}",
       "--test-samples=1000", "--seed=3", "--data=tasks",
       f"--records-per-task={RECORDS_PER_TASK}", "--sample-digest"]
LINE = re.compile(r"sample_digest epoch=(\d+) rank=(\d+) count=(\d+) digest=([0-9a-f]{16})\b")
MASK = (1 << 64) - 1


def mix(sample_id):
    """SampleMix of examples/fashion_mnist_tasks.cc: splitmix64 with the id as its state."""
    z = (sample_id + 0x9e3779b97f4a7c15) & MASK
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & MASK
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & MASK
    return z ^ (z >> 31)


def digest(ids):
    return sum(mix(i) for i in ids) & MASK


def reports_of(text):
    """[(epoch, rank, count, digest)] of the job's sample_digest lines."""
    return [(int(e), int(r), int(c), int(d, 16)) for e, r, c, d in LINE.findall(text)]


def problems_of(reports):
    """What keeps `reports` from showing every sample of every epoch trained exactly once."""
    problems = []
    want = digest(range(SAMPLES))
    for e in sorted({r[0] for r in reports} | set(range(EPOCHS))):
        mine = [r for r in reports if r[0] == e]
        ranks = sorted(r[1] for r in mine)
        if ranks != list(range(RANKS)):
            problems.append(f"epoch {e}: digest lines of ranks {ranks}, want one per rank")
        count, total = sum(r[2] for r in mine), sum(r[3] for r in mine) & MASK
        if count != SAMPLES or total != want:
            problems.append(f"epoch {e}: {count} samples with digest {total:016x}, want "
                            f"{SAMPLES} with {want:016x}")
    return problems


def split(ids, epoch=0):
    """The reports of ranks that trained `ids` between them, half each."""
    half = len(ids) // 2
    return [(epoch, 0, half, digest(ids[:half])), (epoch, 1, len(ids) - half, digest(ids[half:]))]


class TaskDigestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.shards = make_shards(MAKE_SHARDS, cls.workdir, SAMPLES)

    def run_job(self, extra):
        t0 = time.monotonic()
        job = LaunchedJob(JOB + [f"--shards={self.shards}"] + extra, env=ENV)
        rc = job.finish(120)
        job.p.stdout.close()
        print(f"{self.id()}: job exit {rc} in {time.monotonic() - t0:.1f} s", flush=True)
        self.assertEqual(rc, 0, job.text()[-4000:])
        reports = reports_of(job.text())
        self.assertEqual(problems_of(reports), [], job.text()[-4000:])
        for epoch, rank, count, _ in reports:  # each rank read several tasks, not a few samples
            self.assertGreaterEqual(count, 2 * RECORDS_PER_TASK, f"epoch {epoch} rank {rank}")
        return reports

    def test_a_commit_without_allgather(self):
        self.run_job([])

    def test_b_with_ledger_agrees_with_it(self):
        ledger = os.path.join(self.workdir, "ledger")
        reports = self.run_job([f"--sample-ledger={ledger}"])
        # Every rank appends every rank's lines: one step's ids once per (epoch, step,
        # generation, rank), as tools/ledger-check counts them.
        steps = {}
        for name in sorted(os.listdir(ledger)):
            with open(os.path.join(ledger, name)) as f:
                for line in f:
                    d = json.loads(line)
                    steps[(d["epoch"], d["step"], d["generation"], d["rank"])] = d["samples"]
        for epoch, rank, count, got in reports:
            ids = [i for (e, _, _, r), s in steps.items() if (e, r) == (epoch, rank) for i in s]
            self.assertEqual((count, f"{got:016x}"), (len(ids), f"{digest(ids):016x}"),
                             f"epoch {epoch} rank {rank}: digest line vs the ledger's ids")

    def test_c_check_can_fail(self):
        ids = list(range(SAMPLES))
        self.assertEqual(problems_of(split(ids) + split(ids, epoch=1)), [])
        for dropped, repeated in ((0, 1), (17, 5999), (2500, 2501)):
            bad = [repeated if i == dropped else i for i in ids]
            self.assertEqual(len(bad), SAMPLES)
            self.assertNotEqual(digest(bad), digest(ids))
            self.assertNotEqual(problems_of(split(bad) + split(ids, epoch=1)), [],
                                f"{dropped} dropped, {repeated} repeated")

    def test_d_needs_data_tasks(self):
        job = LaunchedJob([LAUNCH, "--nproc=1", "//examples:fashion_mnist", "--sample-digest"],
                          env=ENV)
        rc = job.finish(60)
        job.p.stdout.close()
        self.assertNotEqual(rc, 0)
        self.assertIn("--sample-digest go with --data=tasks", job.text())


    def bad_copy(self, name, k):
        """A copy of the shards, for one test to damage, and the path of its k-th shard."""
        shards = shutil.copytree(self.shards, os.path.join(self.workdir, name))
        indexes = sorted(n for n in os.listdir(shards) if n.endswith(".index"))
        return shards, os.path.join(shards, indexes[k][:-len(".index")])

    def failed_job(self, shards, extra=()):
        t0 = time.monotonic()
        job = LaunchedJob(JOB + [f"--shards={shards}"] + list(extra), env=ENV)
        rc = job.finish(120)
        job.p.stdout.close()
        seconds = time.monotonic() - t0
        print(f"{self.id()}: job exit {rc} in {seconds:.1f} s", flush=True)
        self.assertNotIn(rc, (0, None), job.text()[-4000:])
        # The failing rank ends at once, even when it hosts the store and its peer is still
        # connected (RendezvousResult::failed); it used to wait out PADDLE_CONNECT_TIMEOUT_S (61 s).
        self.assertLess(seconds, 20, job.text()[-4000:])
        return job.text()

    def test_e_corrupt_record(self):
        shards, shard = self.bad_copy("corrupt", 2)
        with open(shard + ".index", "rb") as f:
            index = f.read()
        (length,) = struct.unpack_from("<Q", index, 0)  # the index is one framed record
        offsets = struct.unpack_from(f"<{length // 8}Q", index, 12)
        record = offsets[len(offsets) // 2]  # a record in the middle of the shard
        with open(shard, "r+b") as f:
            f.seek(record + 12)  # past the length and its CRC: the 8-byte sample id
            (bad_id,) = struct.unpack("<q", f.read(8))
            f.seek(record + 12 + 8 + 300)  # a pixel
            byte = f.read(1)[0]
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte ^ 0x40]))
        ledger = os.path.join(self.workdir, "ledger-corrupt")
        text = self.failed_job(shards, [f"--sample-ledger={ledger}"])
        self.assertIn(f"shard {shard}: corrupt record at byte offset {record}", text)
        trained = set()
        for name in os.listdir(ledger) if os.path.isdir(ledger) else []:
            with open(os.path.join(ledger, name)) as f:
                for line in f:
                    trained.update(json.loads(line)["samples"])
        self.assertNotIn(bad_id, trained)

    def test_f_truncated_shard(self):
        shards, shard = self.bad_copy("truncated", 1)
        size = os.path.getsize(shard)
        os.truncate(shard, size - 100)
        text = self.failed_job(shards)
        self.assertIn(f"shard {shard} is {size - 100} bytes but its index says {size}: truncated "
                      f"shard (the records from byte offset {size - 100} on are missing)", text)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
