"""The device-timing helpers: byte counts and bandwidth on any machine, timing where CUDA is."""

import pytest
import torch

from msda_labs.gpu import bench
from msda_labs.truth.cases import DECODER


def test_forward_bytes_decoder_fp16_matches_the_hand_count():
    c = DECODER
    samples = c.B * c.Q * c.M * c.L * c.K
    assert samples == 153_600
    corners = samples * 4 * c.D * 2
    params = samples * 3 * 2
    output = c.B * c.Q * c.M * c.D * 2
    assert (corners, params, output) == (39_321_600, 921_600, 614_400)
    assert bench.forward_bytes(c.B, c.Q, c.M, c.D, c.L, c.K, 2) == 40_857_600


@pytest.mark.parametrize("dims", [(1, 1, 1, 1, 1, 1, 4), (2, 5, 3, 7, 2, 3, 4),
                                  (3, 17, 2, 24, 1, 1, 2)])
def test_forward_bytes_is_linear_in_each_part(dims):
    B, Q, M, D, L, K, itemsize = dims
    expected = (B * Q * M * L * K * (4 * D + 3) + B * Q * M * D) * itemsize
    assert bench.forward_bytes(B, Q, M, D, L, K, itemsize) == expected
    # fp32 is exactly twice fp16, and zero queries move nothing.
    assert bench.forward_bytes(B, Q, M, D, L, K, 4) == 2 * bench.forward_bytes(B, Q, M, D, L, K, 2)
    assert bench.forward_bytes(B, 0, M, D, L, K, itemsize) == 0


@pytest.mark.parametrize("bad", [-1, 2.0, True, None])
def test_forward_bytes_rejects_non_counts(bad):
    with pytest.raises(ValueError):
        bench.forward_bytes(1, bad, 1, 1, 1, 1, 2)


def test_effective_bandwidth_units():
    # 1 GB in 1 ms is 1000 GB/s; 40,857,600 bytes in 13.6 us is about 3 TB/s.
    assert bench.effective_bandwidth_gbs(1e9, 1000.0) == pytest.approx(1000.0)
    assert bench.effective_bandwidth_gbs(40_857_600, 13.6) == pytest.approx(3004.2, rel=1e-4)
    assert bench.effective_bandwidth_gbs(0, 5.0) == 0.0
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError):
            bench.effective_bandwidth_gbs(100, bad)
    with pytest.raises(ValueError):
        bench.effective_bandwidth_gbs(-1, 1.0)


def test_bandwidth_table_prints_the_formula():
    text = bench.bandwidth_table({"2": 80.0, "32": 10.0}, 40_857_600, label="CHUNK_D")
    assert "CHUNK_D" in text and "4085.8" in text and "510.7" in text
    assert "B*Q*M*L*K*(4*D + 3)*itemsize" in text


def test_timing_as_dict_is_plain_data():
    t = bench.Timing(us=1.5, method="cuda-graph", reps=2, samples=(1.0, 2.0), flushed_l2=True)
    assert t.as_dict() == {"us": 1.5, "method": "cuda-graph", "reps": 2, "samples": [1.0, 2.0],
                           "flushed_l2": True}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a CPU-only machine")
def test_timing_refuses_politely_without_cuda():
    calls = []
    with pytest.raises(bench.BenchUnavailable, match="needs a CUDA GPU") as info:
        bench.device_time_us(lambda: calls.append(1))
    assert "interpreter" in str(info.value) and "-gpu" in str(info.value)
    assert calls == [], "nothing may run when there is no device to time it on"
    with pytest.raises(bench.BenchUnavailable):
        bench.side_by_side({"a": lambda: None})
    with pytest.raises(bench.BenchUnavailable):
        bench.end_to_end({"a": lambda: calls.append(1)})
    assert calls == []
    assert not bench.cuda_ready()


@pytest.mark.parametrize("kwargs", [{"reps": 0}, {"warmup": -1}, {"inner": 0},
                                    {"method": "wallclock"}])
def test_timing_rejects_bad_arguments_before_looking_for_a_device(kwargs):
    with pytest.raises(ValueError):
        bench.measure(lambda: None, **kwargs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("method", ["cuda-graph", "cuda-events"])
def test_timing_orders_small_and_large_work(method):
    small = torch.randn(1 << 22, device="cuda")  # 16 MiB: about 10 us, well above the noise
    large = torch.randn(1 << 26, device="cuda")  # 256 MiB
    res = bench.side_by_side({"small": lambda: small.mul_(1.0), "large": lambda: large.mul_(1.0)},
                             reps=10, method=method)
    assert res["small"].method == method
    assert 0 < res["small"].us < res["large"].us
    # 256 MiB read and written: well above a microsecond, well below a second.
    assert 10 < res["large"].us < 1e6


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_auto_falls_back_to_events_when_capture_fails():
    x = torch.randn(1024, device="cuda")
    res = bench.measure(lambda: x.sum().item(), reps=3)  # .item() synchronizes: not capturable
    assert res.method == "cuda-events" and res.us > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_end_to_end_sees_host_waits_that_graphs_do_not():
    import time

    x = torch.randn(1 << 16, device="cuda")

    def sleepy():
        x.mul_(1.0)
        if not torch.cuda.is_current_stream_capturing():
            time.sleep(0.002)

    e2e = bench.end_to_end({"plain": lambda: x.mul_(1.0), "sleepy": sleepy}, reps=5, rounds=3)
    assert e2e["sleepy"] > 2000 > e2e["plain"] > 0
