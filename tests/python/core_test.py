"""The core's fp16/bf16 conversions and Philox streams, checked against numpy and PyTorch."""
import os
import subprocess
import sys

import numpy as np
import pytest

import paddle


def all_bits():
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def test_every_half_value_matches_numpy():
    bits = all_bits()
    ours = paddle.half_to_float(bits)
    ref = bits.view(np.float16).astype(np.float32)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(ours), nan)
    assert np.array_equal(ours[~nan].view(np.uint32), ref[~nan].view(np.uint32))


def test_float_to_half_rounds_like_numpy():
    rng = np.random.default_rng(7)
    x = np.concatenate([
        rng.standard_normal(200_000).astype(np.float32) * np.float32(1000),
        rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        # midpoints between neighbouring halves: ties must go to even
        ((all_bits()[:0x7bff].view(np.float16).astype(np.float32)
          + all_bits()[1:0x7c00].view(np.float16).astype(np.float32)) / 2),
    ])
    ours = paddle.float_to_half(x)
    ref = x.astype(np.float16).view(np.uint16)
    nan = np.isnan(x)
    assert np.array_equal(ours[~nan], ref[~nan])
    assert np.all(np.isnan(paddle.half_to_float(ours[nan])))


def test_float_to_bfloat16_matches_torch():
    torch = pytest.importorskip("torch", reason="python3-torch is the bf16 reference")
    rng = np.random.default_rng(11)
    x = np.concatenate([
        rng.standard_normal(100_000).astype(np.float32),
        rng.integers(0, 1 << 32, 100_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
    ])
    x = x[~np.isnan(x)]
    ours = paddle.float_to_bfloat16(x)
    ref = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(ours, ref)
    back = paddle.bfloat16_to_float(ours)
    assert np.array_equal(back, torch.from_numpy(ref.view(np.int16)).view(torch.bfloat16)
                          .to(torch.float32).numpy())


def test_shapes_survive_and_inputs_are_cast():
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    h = paddle.float_to_half(x)
    assert h.shape == (3, 4) and h.dtype == np.uint16
    assert np.array_equal(paddle.half_to_float(h), x.astype(np.float32))
    assert paddle.float_to_half(np.zeros(0, np.float32)).shape == (0,)


def test_philox_streams_are_reproducible_and_distinct():
    a = paddle.philox_uniform(seed=5, stream=0, n=1000)
    assert np.array_equal(a, paddle.philox_uniform(5, 0, 1000))
    assert not np.array_equal(a, paddle.philox_uniform(5, 1, 1000))
    assert a.min() >= 0.0 and a.max() < 1.0
    assert abs(a.mean() - 0.5) < 0.05
    with pytest.raises(ValueError, match="n must be >= 0"):
        paddle.philox_uniform(1, 0, -1)


def test_dtype_errors_name_the_valid_names():
    assert paddle.dtype_size("bf16") == 2
    with pytest.raises(ValueError, match="float32"):
        paddle.dtype_size("complex64")


def test_convert_path_is_named():
    assert paddle.convert_path() in ("avx2", "portable")


@pytest.mark.parametrize("variable,value,words", [
    ("PADDLE_LOG_LEVEL", "LOUD", "PADDLE_LOG_LEVEL"),
    ("PADDLE_LOG_SUBSYS", "DISK", "unknown subsystem 'DISK'"),
])
def test_malformed_log_setting_is_a_value_error_at_import(variable, value, words):
    # Not an abort at the first log line: the import fails with the variable named.
    code = ("try:\n    import paddle\nexcept ValueError as e:\n    print('ValueError:', e)\n"
            "    raise SystemExit(3)\n")
    env = dict(os.environ, **{variable: value})
    if variable == "PADDLE_LOG_SUBSYS":
        env["PADDLE_LOG_LEVEL"] = "INFO"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert "ValueError:" in done.stdout and words in done.stdout, done.stdout
