"""The Pod of a `pod` job: bound to the node, owned by the job, sized by its slot and mode."""

from __future__ import annotations

from typing import Any

import pytest

from kondor_core.api import ExecutionJob
from kondor_core.jobs.pod import (
    ANNOTATIONS_LIMIT,
    HARVEST,
    HARVEST_PRIORITY_CLASS,
    JOB_AD_ANNOTATION,
    MACHINE_AD_ANNOTATION,
    AdsTooLargeError,
    annotations_size,
    harvest_priority_class,
    job_pod,
    pod_mode,
    pod_name,
    with_job_ad,
)


def job(**template: Any) -> ExecutionJob:
    return ExecutionJob.model_validate(
        {
            "metadata": {"name": "train", "namespace": "ml", "uid": "u-1"},
            "spec": {"pod": {"template": template}},
        }
    )


TEMPLATE: dict[str, Any] = {
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
JOB_AD = 'ClusterId = 3\nCmd = "/bin/sh"\n'
MACHINE_AD = 'Name = "slot1_2@node-a"\nCpus = 2\n'


def build(made: ExecutionJob, *, job_ad: str = JOB_AD, **options: Any) -> dict[str, Any]:
    return job_pod(
        made,
        "u-1#1",
        "node-a",
        SLOT,
        job_ad_text=job_ad,
        machine_ad_text=MACHINE_AD,
        **options,
    )


def test_the_pod_is_bound_owned_and_sized_by_its_slot() -> None:
    pod = build(job(**TEMPLATE))
    assert pod["spec"]["nodeName"] == "node-a"
    assert pod["spec"]["restartPolicy"] == "Never"
    meta = pod["metadata"]
    assert meta["namespace"] == "ml" and meta["name"] == pod_name(job(**TEMPLATE), "u-1#1")
    assert meta["labels"]["app"] == "train"
    assert meta["labels"]["kondor.io/execution-point"] == "node-a"
    assert meta["annotations"]["kondor.io/sim-exit-code"] == "3"
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
    assert pod["spec"]["containers"][0]["env"][0] == {"name": "A", "value": "1"}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert "data" in volumes
    assert TEMPLATE["spec"]["containers"][0].get("resources") is None  # the spec is not changed


def test_one_pod_per_claim_and_names_kubernetes_accepts() -> None:
    long = ExecutionJob.model_validate(
        {"metadata": {"name": "x" * 63}, "spec": {"pod": {"template": TEMPLATE}}}
    )
    first, second = pod_name(long, "u#1"), pod_name(long, "u#2")
    assert first != second and len(first) <= 63


def test_the_pod_carries_both_ads_and_mounts_them_where_the_starter_says() -> None:
    pod = build(job(**TEMPLATE))
    annotations = pod["metadata"]["annotations"]
    assert annotations == {
        "kondor.io/sim-exit-code": "3",  # the template's own, kept
        "kondor.io/job-ad": JOB_AD,
        "kondor.io/machine-ad": MACHINE_AD,
    }
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "kondor-ads"]
    # One downwardAPI volume, each file one annotation's value as it is; no ConfigMap.
    assert volume == {
        "name": "kondor-ads",
        "downwardAPI": {
            "items": [
                {
                    "path": ".job.ad",
                    "fieldRef": {"fieldPath": "metadata.annotations['kondor.io/job-ad']"},
                },
                {
                    "path": ".machine.ad",
                    "fieldRef": {"fieldPath": "metadata.annotations['kondor.io/machine-ad']"},
                },
            ]
        },
    }
    for container in pod["spec"]["containers"]:
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        assert env["_CONDOR_JOB_AD"] == "/etc/kondor/.job.ad"
        assert env["_CONDOR_MACHINE_AD"] == "/etc/kondor/.machine.ad"
        assert env["_CONDOR_SLOT"] == "slot1_2@node-a"
        assert container["volumeMounts"][-1] == {
            "name": "kondor-ads",
            "mountPath": "/etc/kondor",
            "readOnly": True,
        }
    assert TEMPLATE["metadata"]["annotations"] == {"kondor.io/sim-exit-code": "3"}  # not changed


def test_a_template_cannot_stand_in_for_the_ads() -> None:
    forged = {**TEMPLATE, "metadata": {"annotations": {JOB_AD_ANNOTATION: 'Owner = "root"'}}}
    pod = build(job(**forged))
    assert pod["metadata"]["annotations"][JOB_AD_ANNOTATION] == JOB_AD


def test_annotations_are_counted_as_the_api_server_counts_them() -> None:
    # Keys and values, in bytes: "é" is two bytes in UTF-8.
    assert annotations_size({"ab": "cd", "é": "€"}) == 2 + 2 + 2 + 3
    assert ANNOTATIONS_LIMIT == 262144


def _ad_of_total(total: int, template: dict[str, Any]) -> str:
    """A job ad that makes the pod's annotations exactly `total` bytes."""
    given = template.get("metadata", {}).get("annotations", {})
    fixed = annotations_size({**given, JOB_AD_ANNOTATION: "", MACHINE_AD_ANNOTATION: MACHINE_AD})
    head = 'Environment = "X='
    return head + "x" * (total - fixed - len(head) - 2) + '"\n'


def test_ads_up_to_the_limit_fit_and_one_byte_more_is_refused_naming_the_sizes() -> None:
    fits = _ad_of_total(ANNOTATIONS_LIMIT, TEMPLATE)
    pod = build(job(**TEMPLATE), job_ad=fits)
    assert annotations_size(pod["metadata"]["annotations"]) == ANNOTATIONS_LIMIT
    over = _ad_of_total(ANNOTATIONS_LIMIT + 1, TEMPLATE)
    with pytest.raises(AdsTooLargeError) as refused:
        build(job(**TEMPLATE), job_ad=over)
    template_own = len("kondor.io/sim-exit-code") + 1
    assert refused.value.size == ANNOTATIONS_LIMIT + 1
    assert str(refused.value).startswith(
        f"the job ad ({len(over)} bytes) and the machine ad ({len(MACHINE_AD)} bytes) make "
        f"the pod's annotations 262145 bytes (the pod template's own: {template_own} bytes), "
        "over Kubernetes' limit of 262144 bytes (256 KiB) on an object's annotations"
    )


def test_the_templates_own_annotations_count_against_the_limit() -> None:
    fits = _ad_of_total(ANNOTATIONS_LIMIT, {})
    build(job(spec=TEMPLATE["spec"]), job_ad=fits)
    big = {**TEMPLATE, "metadata": {"annotations": {"note": "y" * 1000}}}
    with pytest.raises(AdsTooLargeError, match=r"the pod template's own: 1004 bytes"):
        build(job(**big), job_ad=fits)


def test_an_edited_job_ad_replaces_the_carried_one_and_is_checked_again() -> None:
    pod = build(job(**TEMPLATE))
    edited = with_job_ad(pod, 'SiteTag = "x"\n')
    assert edited["metadata"]["annotations"][JOB_AD_ANNOTATION] == 'SiteTag = "x"\n'
    assert edited["metadata"]["annotations"][MACHINE_AD_ANNOTATION] == MACHINE_AD
    assert pod["metadata"]["annotations"][JOB_AD_ANNOTATION] == JOB_AD  # a copy
    with pytest.raises(AdsTooLargeError, match=r"262145 bytes"):
        with_job_ad(pod, _ad_of_total(ANNOTATIONS_LIMIT + 1, TEMPLATE))


def test_a_harvest_pod_requests_almost_nothing_and_runs_at_the_low_priority() -> None:
    pod = build(job(**TEMPLATE), mode=HARVEST, priority_class="low")
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
    (container,) = build(job(**probed))["spec"]["containers"]
    assert not {"livenessProbe", "readinessProbe", "startupProbe"} & container.keys()


def test_the_pod_mode_comes_from_the_policys_knobs() -> None:
    assert pod_mode({}) == ("dedicated", HARVEST_PRIORITY_CLASS)
    assert pod_mode({"KONDOR_POD_MODE": " Harvest "}) == ("harvest", HARVEST_PRIORITY_CLASS)
    assert pod_mode({"KONDOR_HARVEST_PRIORITY_CLASS": "spare"})[1] == "spare"
    made = harvest_priority_class()
    assert (made["value"], made["preemptionPolicy"]) == (-100, "Never")
