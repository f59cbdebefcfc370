"""The host's time per op by op class (compiler_hooks/torch/tierpool_host_costs.py): eager ops map
to the classes the cost model times their kernels as, a workload's host times turn into per-class
`dispatches`, and the committed H200 measurement gives the ones the built-in h100 carries."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "compiler_hooks", "torch"))
import tierpool_host_costs as hc  # noqa: E402


def test_ops_map_to_the_classes_their_kernels_are_timed_as():
    assert hc.class_of("conv2d") == "conv"
    assert hc.class_of("convolution_backward") == "conv"
    assert hc.class_of("linear") == "gemm"
    assert hc.class_of("batch_norm") == "norm"  # eval mode too: the host pays cuDNN's call
    assert hc.class_of("scaled_dot_product_attention") == "attention"
    assert hc.class_of("mean") == "reduction"
    assert hc.class_of("cat") == "copy"
    assert hc.class_of("_foreach_addcdiv_") == "optimizer"
    assert hc.class_of("view") == "none"
    assert hc.class_of("item") == "none"
    assert hc.class_of("silu") == "elementwise"  # the long tail
    assert hc.class_of("some_new_op") == "elementwise"


def workload(ops, eager_ms, profiled_ms):
    return {"eager_ms": eager_ms, "profiled_step_ms": profiled_ms,
            "ops": {k: {"calls_per_step": c, "host_us_per_call": us} for k, (c, us) in ops.items()}}


def test_a_workloads_host_times_become_ratios_to_an_elementwise_op():
    # 10 relus at 10 us, 2 convolutions at 60 us, views free-ish, a multi-tensor update of
    # 4 parameters in 40 us; the profiler made the step twice as long as it runs eagerly.
    w = workload({"relu": (10, 10.0), "conv2d": (2, 60.0), "view": (5, 1.0),
                  "_foreach_add_": (1, 40.0)}, eager_ms=0.5, profiled_ms=1.0)
    classes, between = hc.class_host_us(w, parameters=4)
    assert between == 0
    assert classes["elementwise"] == (10, pytest.approx(5.0))  # 10 us, halved
    assert classes["conv"] == (2, pytest.approx(30.0))
    assert classes["optimizer"] == (4, pytest.approx(5.0))  # 40 us over 4 parameters, halved
    assert "none" not in classes
    ratios, per_op = hc.dispatches([classes])
    assert ratios == {"conv": pytest.approx(6.0), "elementwise": 1.0,
                      "optimizer": pytest.approx(1.0)}
    assert per_op["elementwise"] == pytest.approx(5.0)
    # Spread: the 1,000 - 100 - 120 - 40 = 740 us outside the kernel ops (views included) over
    # the 12 kernel ops.
    spread, between = hc.class_host_us(w, parameters=4, spread=True)
    assert between == pytest.approx(740 / 12 / 2)
    assert spread["elementwise"][1] == pytest.approx((10 + 740 / 12) / 2)
    assert spread["optimizer"][1] == pytest.approx(5.0)  # takes no share
    # No elementwise op measured: nothing to divide by.
    assert hc.dispatches([{"conv": (2, 30.0)}]) == ({}, {})


def test_the_committed_h200_measurement_gives_the_builtin_h100_dispatches():
    tool = os.environ.get("TIERPOOL_CLI")
    if not tool:
        pytest.skip("TIERPOOL_CLI (the tierpool binary) not given")
    with open(os.path.join(ROOT, "docs", "data", "gpu-h200", "eager-op-host-h200.json")) as f:
        data = json.load(f)
    params = {"resnet50": 161, "vit_b_16": 152, "transformer12": 144}
    measured = hc.measured_classes(data, params)
    ratios, _ = hc.dispatches([classes for classes, _ in measured.values()])
    profile = json.loads(subprocess.run([tool, "schedule", "profile", "--device", "h100"],
                                        check=True, capture_output=True, text=True).stdout)
    for c, r in ratios.items():
        # The built-in rounds to two digits.
        assert profile["ops"][c]["dispatches"] == pytest.approx(r, abs=0.06), c
