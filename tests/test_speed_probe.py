"""A run's own calibration: the speed probe, the day's ratios, and the profile priced as fast as the machine ran."""

from __future__ import annotations

import pytest
from support.costmodel_profiles import two_core_profile

from muon_repro.bench.configs import resolve
from muon_repro.bench.speed_probe import SpeedProbe, day_ratios, measure_speed, nearest_world
from muon_repro.costmodel.machine import profile_from_dict
from muon_repro.costmodel.machine_profile import ProfileError
from muon_repro.costmodel.predict import predict


def probe(world: int = 4, matmul: float = 50.0, stream: float = 20.0, op: float = 4.0, all_reduce: float | None = 4000.0):
    return SpeedProbe(world, matmul, stream, op, all_reduce if world > 1 else None, 0.5)


def profile(**calibration):
    return profile_from_dict(two_core_profile(calibration=calibration))


def test_day_ratios_are_rates_over_rates_and_times_under_times():
    calibrated = probe()
    slow = probe(matmul=25.0, stream=10.0, op=8.0, all_reduce=8000.0)
    assert day_ratios(slow, calibrated) == {"compute": 0.5, "memory": 0.5, "host": 0.5, "network": 0.5}
    assert "network" not in day_ratios(probe(world=1), probe(world=1))


def test_the_calibrations_probe_of_the_nearest_world_is_the_reference():
    probes = {2: probe(2), 4: probe(4)}
    assert nearest_world(probes, 4) is probes[4] and nearest_world(probes, 8) is probes[4]
    assert nearest_world(probes, 1) is probes[2]
    with pytest.raises(ValueError, match="no speed probe"):
        nearest_world({}, 4)


def test_a_probe_that_is_not_one_is_refused_by_name():
    with pytest.raises(ValueError, match="matmul_gflops"):
        SpeedProbe(4, 0.0, 20.0, 4.0, 4000.0, 0.5)
    with pytest.raises(ValueError, match=r"run/environment.json: speed_probe: not a speed probe"):
        SpeedProbe.from_dict({"world_size": 4}, "run/environment.json: speed_probe")


def test_a_run_on_a_slow_day_is_priced_slower_by_its_own_calibration():
    machine = profile(speed_probe={"4": probe().to_dict()})
    cfg = resolve("comparison/muon_dp2_tp2", "cpu")
    as_calibrated = predict(cfg, machine, profiled=False)
    same_day = predict(cfg, machine.on_day(probe()), profiled=False)
    half_speed = machine.on_day(probe(matmul=25.0), probe(matmul=25.0), probe(matmul=100.0))  # the median of the trials
    assert half_speed.day_speed == 0.5
    slow = predict(cfg, half_speed, profiled=False)
    assert same_day.step_ms == pytest.approx(as_calibrated.step_ms)
    # every rate halves and every collective takes twice as long; only the late-arrival waits stay as measured
    assert slow.step_ms > 1.8 * as_calibrated.step_ms
    assert slow.mean("transfer_ms") == pytest.approx(2 * as_calibrated.mean("transfer_ms"))
    assert "day_speed" not in machine.to_dict()  # a run's figure, never a profile's


def test_a_probe_in_a_world_larger_than_the_calibrations_is_judged_against_the_share_its_ranks_keep():
    """Calibrated with 2 ranks (each its own core of the 2), a run of 4 ranks shares the 2 cores: its probe's matmul
    rate halves (compute_share[4] = 0.5) on a normal day. Its compute ratio is 25 / 50 over the expected
    (2 cores / 4 ranks) / (2 cores / 2 ranks) = 0.5, so 1.0, not a half-speed day; a world the calibration measured
    is compared as it is."""
    machine = profile(speed_probe={"2": probe(2).to_dict()})  # compute_share {2: 1.0, 4: 0.5}
    assert machine.day_ratios(probe(4, matmul=25.0))["compute"] == pytest.approx(1.0)
    assert machine.day_ratios(probe(2, matmul=25.0))["compute"] == pytest.approx(0.5)


def test_a_profile_without_a_calibration_probe_says_to_calibrate_again():
    with pytest.raises(ProfileError, match="calibrate it again"):
        profile().on_day(probe())
    with pytest.raises(ProfileError, match="day_speed"):
        profile_from_dict({**profile().to_dict(), "day_speed": 0.0})


def test_measure_speed_alone_times_every_kernel_but_the_collective():
    measured = measure_speed("cpu")
    assert measured.world_size == 1 and measured.all_reduce_us is None
    assert measured.matmul_gflops > 0 and measured.stream_gbps > 0 and measured.op_us > 0
    assert measured.seconds < 5  # the probe is a second's work, not a calibration's minute
