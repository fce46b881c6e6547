"""Benchmark: carve a 256-core, 2 TiB, 8-GPU machine into 256 dynamic slots and render every ad.

Run: .venv/bin/python bench/bench_carving.py [--repeat N]

Prints the median of N runs of the whole job (lay out, carve 256 dynamic slots,
render the 257 slot ads as JSON-able dicts), its parts, and beside them the
baseline: what classad2 itself costs to build one comparable slot ad and
evaluate the job's rounding expressions against it, and that times 257 ads.
Exits 1 if the median is over the target (50 ms).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import classad2

from kondor_core.api.machine import Machine
from kondor_core.config.effective import EffectivePolicy
from kondor_core.slots import (
    PartitionableSlot,
    Refusal,
    carve,
    initial_slots,
    layout,
    slot_ads,
)

TARGET_MS = 50.0
SLOTS = 256


def machine() -> Machine:
    return Machine(
        name="big-node",
        cpus=256,
        memory="2Ti",
        disk="8Ti",
        swap="64Gi",
        gpus=[
            {
                "id": f"GPU-{index:08x}",
                "properties": {
                    "Capability": 8.0,
                    "DeviceName": "NVIDIA A100-SXM4-80GB",
                    "GlobalMemoryMb": 81920,
                    "DriverVersion": 12.4,
                },
            }
            for index in range(8)
        ],
        attributes={"OpSys": "LINUX", "Arch": "X86_64", "KeyboardIdle": 3600},
    )


def requests() -> list[Any]:
    """256 one-core jobs of ~8 GiB; every 32nd asks for a GPU with Capability >= 8.0."""
    ads = []
    for index in range(SLOTS):
        values: dict[str, Any] = {
            "RequestCpus": 1,
            "RequestMemory": 8000,
            "RequestDisk": 20 * 1024 * 1024,
            "Owner": "alice",
        }
        if index % 32 == 0:
            values["RequestGPUs"] = 1
            values["RequireGPUs"] = classad2.ExprTree("Capability >= 8.0")
        ads.append(classad2.ClassAd(values))
    return ads


def run(node: Machine, policy: EffectivePolicy, jobs: list[Any]) -> dict[str, float]:
    start = time.perf_counter()
    result = layout(node, policy)
    (pslot,) = initial_slots(result)
    assert isinstance(pslot, PartitionableSlot)
    laid_out = time.perf_counter()
    for index, job in enumerate(jobs):
        outcome = carve(pslot, job, request=f"job-{index}")
        if isinstance(outcome, Refusal):
            raise SystemExit(f"benchmark setup is wrong: {outcome.reason}")
        pslot, _ = outcome
    carved = time.perf_counter()
    ads = slot_ads(result, [pslot])
    rendered = time.perf_counter()
    assert len(ads) == SLOTS + 1, len(ads)
    return {
        "total": (rendered - start) * 1000,
        "layout": (laid_out - start) * 1000,
        "carve": (carved - laid_out) * 1000,
        "render": (rendered - carved) * 1000,
    }


def baseline(sample_ad: dict[str, Any], job: Any) -> float:
    """classad2 alone: build one slot ad of the same attributes and evaluate the three
    rounding expressions and the slot's Requirements against the job (milliseconds)."""
    rounding = [
        classad2.ExprTree("quantize(RequestCpus,{1})"),
        classad2.ExprTree("quantize(RequestMemory,{128})"),
        classad2.ExprTree("quantize(RequestDisk,{1024})"),
    ]
    values: dict[str, Any] = {}
    for key, value in sample_ad.items():
        values[key] = classad2.ClassAd(value) if isinstance(value, dict) else value
    requirements = classad2.ExprTree("START && WithinResourceLimits")

    def once() -> None:
        ad = classad2.ClassAd(values)
        for tree in rounding:
            tree.eval(job)
        requirements.eval(ad, job)

    return _median_ms(once, 200)


def _median_ms(action: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30, help="runs to take the median of")
    args = parser.parse_args(argv)
    node, policy, jobs = machine(), EffectivePolicy(), requests()
    run(node, policy, jobs)  # warm caches (parsed expressions) as a running agent has them
    runs = [run(node, policy, jobs) for _ in range(args.repeat)]
    median = {part: statistics.median(r[part] for r in runs) for part in runs[0]}

    result = layout(node, policy)
    (pslot,) = initial_slots(result)
    assert isinstance(pslot, PartitionableSlot)
    outcome = carve(pslot, jobs[0])
    assert not isinstance(outcome, Refusal)
    sample = slot_ads(result, [outcome[0]])[1].attributes
    one_ad = baseline(sample, jobs[0])
    dynamic_ad = slot_ads(result, [outcome[0]])[1]
    to_classad_ms = _median_ms(dynamic_ad.to_classad, 200)

    print(f"carve {SLOTS} dynamic slots from 256 cores / 2 TiB / 8 GPUs and render all ads")
    print(f"  runs:                       {args.repeat}")
    print(f"  median total:               {median['total']:8.2f} ms   (target {TARGET_MS:.0f} ms)")
    print(f"    layout:                   {median['layout']:8.2f} ms")
    print(f"    carve {SLOTS}:                {median['carve']:8.2f} ms")
    print(f"    render {SLOTS + 1} ads (JSON):    {median['render']:8.2f} ms")
    print(f"  baseline, classad2 alone: one comparable ad ({len(sample)} attributes) built and")
    print(
        f"    evaluated:                {one_ad * 1000:8.1f} us;  x {SLOTS + 1} ads = "
        f"{one_ad * (SLOTS + 1):.2f} ms"
    )
    print(f"  one ad as a classad2.ClassAd (on demand): {to_classad_ms * 1000:.1f} us")
    if median["total"] > TARGET_MS:
        print(f"FAIL: {median['total']:.2f} ms is over the {TARGET_MS:.0f} ms target")
        return 1
    print("OK: under target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
