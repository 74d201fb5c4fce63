"""examples/custom_model.py: a model written in Python trains to a stated accuracy, and a run
resumed from its checkpoint computes the same parameters as an uninterrupted one."""
import json
import os
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "custom_model.py")


def run(*flags):
    done = subprocess.run([sys.executable, EXAMPLE, "--threads=1", *flags], capture_output=True,
                          text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_trains_to_the_stated_accuracy():
    result = run("--epochs=1", "--train-samples=12000", "--min-accuracy=0.75")
    assert result["test_accuracy"] >= 0.75 and result["world_size"] == 1


def test_resume_from_checkpoint_is_bit_for_bit(tmp_path):
    ckpt = str(tmp_path / "net.ckpt")
    straight = run("--epochs=2", "--train-samples=3000")
    run("--epochs=1", "--train-samples=3000", f"--checkpoint={ckpt}")
    resumed = run("--epochs=2", "--train-samples=3000", f"--checkpoint={ckpt}", "--resume")
    assert resumed["param_hash"] == straight["param_hash"]
    assert resumed["test_accuracy"] == straight["test_accuracy"]
