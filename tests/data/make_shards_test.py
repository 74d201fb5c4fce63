"""tools:make_shards and tools/ledger-check end to end: shards from Fashion-MNIST and from .npy
arrays read back byte for byte (framing and CRC-32C recomputed here independently, in Python),
an index built for a file without one, bad inputs refused, and the ledger checker's counts and
exit codes on a clean, a lossy, a repeating and a malformed ledger."""
import json
import os
import struct
import subprocess
import tempfile
import unittest

import numpy as np

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ""), "paddle")
MAKE_SHARDS = os.path.join(RUNFILES, "tools", "make_shards")
LEDGER_CHECK = os.path.join(RUNFILES, "tools", "ledger-check")


def crc32c(data):
    """Bitwise CRC-32C, written from the polynomial, to check ISA-L's from outside."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path, check_crc=True):
    out = []
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    while at < len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        (lcrc,) = struct.unpack_from("<I", data, at + 8)
        body = data[at + 12:at + 12 + length]
        (dcrc,) = struct.unpack_from("<I", data, at + 12 + length)
        if check_crc:
            assert lcrc == masked(crc32c(data[at:at + 8])), (path, at)
            assert dcrc == masked(crc32c(body)), (path, at)
        out.append(body)
        at += 16 + length
    return out


def slurp(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=120, **kw)


class MakeShardsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))

    def test_npy_round_trip_and_index(self):
        x = (np.arange(7 * 3 * 2, dtype=np.float32) * 0.5).reshape(7, 3, 2)
        y = np.arange(7, dtype=np.int64) * 11
        np.save(os.path.join(self.dir, "x.npy"), x)
        np.save(os.path.join(self.dir, "y.npy"), y)
        out = os.path.join(self.dir, "shards")
        os.mkdir(out)
        r = run([MAKE_SHARDS, "--out=" + out, "--records-per-shard=3",
                 "--npy=%s/x.npy,%s/y.npy" % (self.dir, self.dir)])
        self.assertEqual(r.returncode, 0, r.stderr)
        manifest = slurp(os.path.join(out, "MANIFEST")).split("\n")
        self.assertEqual(manifest[:3], ["paddle-shards 1", "field x float32 3,2", "field y int64 1"])
        self.assertEqual(manifest[3:6], ["shard shard-00000-of-00003 3", "shard shard-00001-of-00003 3",
                                         "shard shard-00002-of-00003 1"])
        records = []
        for s in range(3):
            records += read_records(os.path.join(out, "shard-%05d-of-00003" % s))
        self.assertEqual(len(records), 7)
        for i, rec in enumerate(records):
            self.assertEqual(struct.unpack_from("<Q", rec)[0], i)
            self.assertEqual(rec[8:8 + 24], x[i].tobytes())
            self.assertEqual(rec[32:], y[i].tobytes())
        # The index: one framed record of n + 1 offsets.
        (index,) = read_records(os.path.join(out, "shard-00000-of-00003.index"))
        offsets = struct.unpack("<4Q", index)
        self.assertEqual(offsets, (0, 56, 112, 168))
        # --index-only rebuilds the same index for a file that has none.
        idx = os.path.join(out, "shard-00000-of-00003.index")
        before = slurp(idx, "rb")
        os.unlink(idx)
        r = run([MAKE_SHARDS, "--index-only=" + os.path.join(out, "shard-00000-of-00003")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(slurp(idx, "rb"), before)

    def test_fashion_mnist_test_split(self):
        out = os.path.join(self.dir, "not", "made", "yet")  # --out is created
        r = run([MAKE_SHARDS, "--out=" + out, "--fashion-mnist", "--split=test",
                 "--records-per-shard=4000"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("wrote 10000 samples to " + out, r.stdout)
        self.assertEqual(os.listdir(self.dir), ["not"])
        manifest = slurp(os.path.join(out, "MANIFEST"))
        self.assertIn("field label uint8 1\nfield image uint8 28,28\n", manifest)
        self.assertIn("shard shard-00002-of-00003 2000\n", manifest)
        records = read_records(os.path.join(out, "shard-00002-of-00003"), check_crc=False)
        self.assertEqual(len(records), 2000)
        self.assertEqual(struct.unpack_from("<Q", records[0])[0], 8000)
        self.assertTrue(all(len(r) == 8 + 1 + 784 and r[8] < 10 for r in records))

    def test_help(self):
        r = run([MAKE_SHARDS, "--help"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("usage: make_shards --out=DIR", r.stdout)

    def test_bad_inputs(self):
        np.save(os.path.join(self.dir, "f.npy"), np.asfortranarray(np.zeros((3, 2))))
        np.save(os.path.join(self.dir, "c.npy"), np.zeros((3, 2)))
        bad = os.path.join(self.dir, "bad.npy")
        with open(bad, "wb") as f:
            f.write(b"not numpy")
        np.save(os.path.join(self.dir, "short.npy"), np.zeros(4))
        huge = os.path.join(self.dir, "huge.npy")  # a version 2 header length of ~4 GiB
        with open(huge, "wb") as f:
            f.write(b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xFFFFFFF0) + b"{}")
        wide = os.path.join(self.dir, "wide.npy")  # rows whose size overflows int64
        header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, %d, %d), }" % (2**40, 2**40)
        with open(wide, "wb") as f:
            f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        np.save(os.path.join(self.dir, "empty_rows.npy"), np.zeros((3, 0)))
        cases = [([], "give --out"),
                 (["--out=" + self.dir, "--npy=" + bad], "not a .npy file"),
                 (["--out=" + self.dir, "--npy=%s/f.npy" % self.dir], "fortran_order"),
                 (["--out=" + self.dir, "--npy=%s/c.npy,%s/short.npy" % (self.dir, self.dir)],
                  "has 4 rows"),
                 (["--out=" + self.dir, "--npy=" + huge], "header length 4294967280"),
                 (["--out=" + self.dir, "--npy=" + wide], "over 1073741824 bytes"),
                 (["--out=" + self.dir, "--npy=%s/empty_rows.npy" % self.dir], "empty"),
                 (["--records-per-shard=0"], "bad argument")]
        for args, text in cases:
            r = run([MAKE_SHARDS] + args)
            self.assertEqual(r.returncode, 1, args)
            self.assertIn(text, r.stderr, args)


class LedgerCheckTest(unittest.TestCase):
    def ledger(self, lines_per_file):
        d = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        for n, lines in enumerate(lines_per_file):
            with open(os.path.join(d, "rank%d.jsonl" % n), "w") as f:
                for line in lines:
                    f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
        return d

    def check(self, d, samples=6, epochs=2):
        return run([LEDGER_CHECK, d, "--samples=%d" % samples, "--epochs=%d" % epochs])

    def test_clean_ledger_passes(self):
        d = self.ledger([[{"epoch": 0, "step": 0, "samples": [0, 1, 2]},
                          {"epoch": 1, "step": 2, "samples": [5, 4, 3]}],
                         [{"epoch": 0, "step": 1, "samples": [3, 4, 5]},
                          {"epoch": 1, "step": 3, "samples": [2, 1, 0]}]])
        r = self.check(d)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("total: 0 missing, 0 repeated", r.stdout)

    def test_missing_and_repeated_are_counted(self):
        d = self.ledger([[{"epoch": 0, "step": 0, "samples": [0, 1, 2, 2]},
                          {"epoch": 1, "step": 1, "samples": [0, 1, 2, 3, 4, 5, 5, 5]}]])
        r = self.check(d)
        self.assertEqual(r.returncode, 1)
        self.assertIn("epoch 0: 3 missing, 1 repeated; missing e.g. [3, 4, 5]", r.stdout)
        self.assertIn("epoch 1: 0 missing, 2 repeated", r.stdout)
        self.assertIn("total: 3 missing, 3 repeated", r.stdout)

    def test_lines_of_one_step_written_by_several_workers_count_once(self):
        a = {"epoch": 0, "step": 1, "generation": 2, "rank": 0, "samples": [0, 1, 2]}
        b = {"epoch": 0, "step": 1, "generation": 2, "rank": 1, "samples": [3, 4, 5]}
        d = self.ledger([[a, b], [a, b]])
        r = self.check(d, epochs=1)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # The same step redone in a later generation is a second sighting.
        d = self.ledger([[a, b], [dict(a, generation=3)]])
        r = self.check(d, epochs=1)
        self.assertEqual(r.returncode, 1)
        self.assertIn("epoch 0: 0 missing, 3 repeated", r.stdout)
        # One step listed with other samples by another worker: the ledger is inconsistent.
        d = self.ledger([[a, b], [dict(a, samples=[0, 1, 3])]])
        r = self.check(d, epochs=1)
        self.assertEqual(r.returncode, 2)
        self.assertIn("rank1.jsonl:1: epoch 0 step 1 generation 2 rank 0 lists other samples",
                      r.stderr)

    def test_bad_lines_are_named(self):
        d = self.ledger([["{not json", {"epoch": 0, "step": 0, "samples": [9]},
                          {"epoch": 7, "step": 0, "samples": [1]},
                          {"epoch": 0, "step": 0, "samples": 5},
                          {"epoch": 0, "step": 0, "samples": [True]}]])
        with open(os.path.join(d, "stray.bin"), "wb") as f:
            f.write(b"\xff\xfe\x00binary\n")
        r = self.check(d)
        self.assertEqual(r.returncode, 2)
        self.assertIn("rank0.jsonl:4: not a ledger line (samples is int", r.stderr)
        self.assertIn("rank0.jsonl:5: sample id True is outside", r.stderr)
        self.assertIn("stray.bin:1: not a ledger line", r.stderr)
        self.assertIn("rank0.jsonl:1: not a ledger line", r.stderr)
        self.assertIn("rank0.jsonl:2: sample id 9 is outside [0, 6)", r.stderr)
        self.assertIn("rank0.jsonl:3: epoch 7 is outside [0, 2)", r.stderr)


if __name__ == "__main__":
    unittest.main()
