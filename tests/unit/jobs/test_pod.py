"""The Pod of a `pod` job: bound to the node, owned by the job, sized by its slot and mode."""

from __future__ import annotations

from typing import Any

from kondor_core.api import ExecutionJob
from kondor_core.jobs.pod import (
    HARVEST,
    HARVEST_PRIORITY_CLASS,
    ads_config_map,
    harvest_priority_class,
    job_pod,
    pod_mode,
    pod_name,
)


def job(**template: Any) -> ExecutionJob:
    return ExecutionJob.model_validate(
        {
            "metadata": {"name": "train", "namespace": "ml", "uid": "u-1"},
            "spec": {"pod": {"template": template}},
        }
    )


TEMPLATE = {
    "metadata": {"labels": {"app": "train"}, "annotations": {"kondor.io/sim-exit-code": "3"}},
    "spec": {
        "containers": [
            {"name": "main", "image": "busybox", "env": [{"name": "A", "value": "1"}]},
            {"name": "side", "image": "busybox"},
        ],
        "volumes": [{"name": "data", "emptyDir": {}}],
    },
}
SLOT = {"Name": "slot1_2@node-a", "Cpus": 2, "Memory": 1536, "GPUs": 1}


def test_the_pod_is_bound_owned_and_sized_by_its_slot() -> None:
    pod = job_pod(job(**TEMPLATE), "u-1#1", "node-a", SLOT)
    assert pod["spec"]["nodeName"] == "node-a"
    assert pod["spec"]["restartPolicy"] == "Never"
    meta = pod["metadata"]
    assert meta["namespace"] == "ml" and meta["name"] == pod_name(job(**TEMPLATE), "u-1#1")
    assert meta["labels"]["app"] == "train"
    assert meta["labels"]["kondor.io/execution-point"] == "node-a"
    assert meta["annotations"] == {"kondor.io/sim-exit-code": "3"}
    owner = meta["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "ExecutionJob",
        "train",
        "u-1",
        True,
    )
    expected = {"cpu": "2", "memory": "1536Mi", "nvidia.com/gpu": "1"}
    for container in pod["spec"]["containers"]:
        assert container["resources"] == {"requests": expected, "limits": expected}
        names = [e["name"] for e in container["env"]]
        assert {"_CONDOR_JOB_AD", "_CONDOR_MACHINE_AD", "_CONDOR_SLOT"} <= set(names)
        assert container["volumeMounts"][-1]["mountPath"] == "/etc/kondor"
    assert pod["spec"]["containers"][0]["env"][0] == {"name": "A", "value": "1"}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["kondor-ads"]["configMap"]["name"] == meta["name"]
    assert "data" in volumes
    assert TEMPLATE["spec"]["containers"][0].get("resources") is None  # the spec is not changed


def test_one_pod_per_claim_and_names_kubernetes_accepts() -> None:
    long = ExecutionJob.model_validate(
        {"metadata": {"name": "x" * 63}, "spec": {"pod": {"template": TEMPLATE}}}
    )
    first, second = pod_name(long, "u#1"), pod_name(long, "u#2")
    assert first != second and len(first) <= 63


def test_the_ads_config_map_holds_both_ads() -> None:
    made = ads_config_map(job(**TEMPLATE), "u-1#1", "node-a", "A = 1\n", "B = 2\n")
    assert made["data"] == {".job.ad": "A = 1\n", ".machine.ad": "B = 2\n"}
    assert made["metadata"]["name"] == pod_name(job(**TEMPLATE), "u-1#1")


def test_a_harvest_pod_requests_almost_nothing_and_runs_at_the_low_priority() -> None:
    pod = job_pod(job(**TEMPLATE), "u-1#1", "node-a", SLOT, mode=HARVEST, priority_class="low")
    assert pod["spec"]["priorityClassName"] == "low"
    for container in pod["spec"]["containers"]:
        # Limits stay the slot; GPUs cannot be overcommitted, so they stay requested.
        assert container["resources"]["limits"] == {
            "cpu": "2",
            "memory": "1536Mi",
            "nvidia.com/gpu": "1",
        }
        assert container["resources"]["requests"] == {
            "cpu": "1m",
            "memory": "1Mi",
            "nvidia.com/gpu": "1",
        }


def test_job_pods_have_no_probes() -> None:
    probed = {
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "livenessProbe": {"exec": {"command": ["true"]}},
                    "readinessProbe": {"exec": {"command": ["true"]}},
                    "startupProbe": {"exec": {"command": ["true"]}},
                }
            ]
        }
    }
    (container,) = job_pod(job(**probed), "u-1#1", "node-a", SLOT)["spec"]["containers"]
    assert not {"livenessProbe", "readinessProbe", "startupProbe"} & container.keys()


def test_the_pod_mode_comes_from_the_policys_knobs() -> None:
    assert pod_mode({}) == ("dedicated", HARVEST_PRIORITY_CLASS)
    assert pod_mode({"KONDOR_POD_MODE": " Harvest "}) == ("harvest", HARVEST_PRIORITY_CLASS)
    assert pod_mode({"KONDOR_HARVEST_PRIORITY_CLASS": "spare"})[1] == "spare"
    made = harvest_priority_class()
    assert (made["value"], made["preemptionPolicy"]) == (-100, "Never")
