"""The engine's C++ cost model (paddle/collective/algorithms/allreduce_cost_model.cc) picks the
same allreduce algorithm as `tools/simulate tune` at every size from 4 KiB to 256 MiB, for the
TCP and shared-memory links fitted from the recorded sweeps (testdata/simulator_bench.json),
through the tuning file `tools/simulate tune --emit` writes (Note [Tuned allreduce])."""
import json
import os
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.realpath(__file__))
SIMULATE = os.path.join(HERE, "..", "..", "tools", "simulate")
FIXTURE = os.path.join(HERE, "testdata", "simulator_bench.json")
CHOICES = os.path.join(os.environ.get("TEST_SRCDIR", ""), "paddle", "tests", "collective",
                       "algorithms", "tuning_choices")
PIECE_BYTES = 256 << 10  # schedules.PIECE_BYTES, the engine's default piece
NPROC = ("2", "3", "4", "5", "8", "16")


class TuningAgreementTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.params = os.path.join(cls.tmp, "params.json")
        with open(cls.params, "w") as f:
            subprocess.run(["/usr/bin/python3", SIMULATE, "fit", FIXTURE, "--cores=2"], stdout=f,
                           stderr=subprocess.DEVNULL, check=True)

    def check_link(self, link):
        tuning = os.path.join(self.tmp, link + ".tuning")
        table = os.path.join(self.tmp, link + ".json")
        subprocess.run(["/usr/bin/python3", SIMULATE, "tune", "--params=" + self.params,
                        "--link=" + link, "--nproc=" + ",".join(NPROC), "--emit=" + tuning,
                        "--json=" + table], stdout=subprocess.DEVNULL, check=True)
        with open(table) as f:
            python = {(r["nproc"], r["bytes"]): r["model"] for r in json.load(f)["rows"]}
        out = subprocess.run([CHOICES, tuning, link, str(PIECE_BYTES)] + list(NPROC),
                             capture_output=True, text=True, check=True).stdout
        cpp = {}
        for line in out.splitlines():
            n, nbytes, algo = line.split()
            cpp[(int(n), int(nbytes))] = algo
        self.assertEqual(len(cpp), len(NPROC) * 17)
        self.assertEqual(set(cpp), set(python))
        differ = {k: (python[k], cpp[k]) for k in python if python[k] != cpp[k]}
        self.assertEqual(differ, {}, f"{link}: (nproc, bytes): (python, c++)")
        # The fixture's fits make more than one algorithm win somewhere, or this proves little.
        self.assertGreater(len(set(python.values())), 1)

    def test_tcp(self):
        self.check_link("tcp")

    def test_shm(self):
        self.check_link("shm")

    def test_emitted_file_is_exact_and_rejected_when_broken(self):
        tuning = os.path.join(self.tmp, "exact.tuning")
        subprocess.run(["/usr/bin/python3", SIMULATE, "tune", "--params=" + self.params,
                        "--link=tcp", "--nproc=2", "--emit=" + tuning], stdout=subprocess.DEVNULL,
                       check=True)
        with open(self.params) as f:
            fitted = json.load(f)["transports"]
        with open(tuning) as f:
            lines = [l.split() for l in f if l.startswith("link ")]
        self.assertEqual({l[1] for l in lines},
                         {k for k in fitted if k.split("@")[0] in ("tcp", "shm", "ucx")})
        for l in lines:
            self.assertEqual([float(v) for v in l[2:]],
                             [fitted[l[1]][k] for k in ("alpha_us", "overhead_us",
                                                        "beta_us_per_byte", "gamma_us_per_byte",
                                                        "memory_us_per_byte", "rendezvous_us",
                                                        "rendezvous_beta_us_per_byte",
                                                        "cache_bytes", "eager_bytes",
                                                        "small_page_us_per_byte",
                                                        "huge_page_bytes")])
        broken = os.path.join(self.tmp, "broken.tuning")
        with open(broken, "w") as f:
            f.write("paddle_tuning_params 1\nlink tcp 1 2 -3 4\n")
        run = subprocess.run([CHOICES, broken, "tcp", str(PIECE_BYTES), "2"], capture_output=True,
                             text=True)
        self.assertEqual(run.returncode, 2)
        self.assertIn(broken + ":2: link tcp: beta_us_per_byte is \"-3\"", run.stderr)


if __name__ == "__main__":
    unittest.main()
