"""Host sampling for real (psutil); GPU sampling through NVML.

This machine has no NVIDIA GPU, so the real pynvml path is exercised as "no GPU"
(the library is missing), and a stand-in NVML module (the one thing we lack) drives the
per-GPU code: what the sampler asks of NVML and how it handles unsupported readings.
"""

from __future__ import annotations

import logging

import pytest
from support.nvml_fake import FakeNVMLError, fake_nvml
from support.waiting import wait_until

from pilothouse.node.sampler import SystemSampler


def test_real_nvml_on_a_node_without_gpu_is_a_normal_state(caplog):
    caplog.set_level(logging.INFO, logger="pilothouse.sampler")
    sampler = SystemSampler()
    sample = sampler.sample()
    sampler.sample()
    assert sampler.gpu_count == 0
    assert not any(k.startswith("gpu") for k in sample)
    assert 0.0 <= sample["cpu/util"] <= 100.0 and 0 < sample["ram/used_gb"] < sample["ram/total_gb"]
    notes = [r for r in caplog.records if r.name == "pilothouse.sampler"]
    assert len(notes) == 1 and notes[0].levelno == logging.INFO  # said once, not per sample


def test_every_gpu_reports_util_memory_power_and_temperature():
    sample = SystemSampler(fake_nvml(2)).sample()
    assert sample["gpu1/util"] == 41 and sample["gpu0/mem_used_gb"] == 1.0 and sample["gpu1/mem_total_gb"] == 80
    assert sample["gpu0/power_w"] == 250.0 and sample["gpu1/temp_c"] == 61 and sample["gpu0/throttle"] == 0


def test_throttle_keeps_only_the_slowdown_reasons():
    """A thermal slowdown (0x40) is reported; idle (0x1) and a power cap (0x4) alone are normal clocks."""
    sample = SystemSampler(fake_nvml(2, state=lambda: {"0": {"throttle": 0x40 | 0x1}, "1": {"throttle": 0x4}})).sample()
    assert sample["gpu0/throttle"] == 0x40 and sample["gpu1/throttle"] == 0


def test_a_lost_gpu_reports_nothing_and_the_others_go_on():
    sample = SystemSampler(fake_nvml(2, state=lambda: {"1": {"lost": True}})).sample()
    assert sample["gpu0/util"] == 40 and not any(k.startswith("gpu1/") for k in sample)


def test_an_unsupported_reading_is_skipped_not_fatal():
    sample = SystemSampler(fake_nvml(1, power_supported=False)).sample()
    assert "gpu0/power_w" not in sample and sample["gpu0/util"] == 40


def test_driver_missing_means_no_gpus():
    m = fake_nvml(1)

    def broken():
        raise FakeNVMLError("Driver Not Loaded")

    m.nvmlInit = broken
    sampler = SystemSampler(m)
    assert sampler.gpu_count == 0 and "gpu0/util" not in sampler.sample()


def test_missing_library_means_no_gpus():
    assert SystemSampler(None).gpu_count == 0


@pytest.mark.timeout(30)
def test_agent_stores_and_streams_host_samples(agent_proc):
    with agent_proc.client() as c:
        sys_run = next(r for r in c.runs() if r["kind"] == "system")
        wait_until(lambda: len(c.series(sys_run["id"], "cpu/util")[0]) >= 2, what="two samples")
        steps, vals, times = c.series(sys_run["id"], "ram/used_gb")
        assert (vals > 0).all() and (times[1:] > times[:-1]).all()
        page = next(p for p in c.follow(after=c.ping()["head"], run=sys_run["id"]) if p.entries)
        assert {e.metric for e in page.entries} >= {"cpu/util", "ram/util"}
