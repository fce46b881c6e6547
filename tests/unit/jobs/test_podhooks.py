"""What PREPARE_JOB's edits do to a pod job's Pod (kondor_core.jobs.podhooks): those with a
meaning in a container edit the job container; those a Pod cannot take are refused naming the
attribute, its value and why."""

from __future__ import annotations

from typing import Any

import pytest

from kondor_core.jobs.podhooks import PodEditError, PodEdits, apply_pod_edits, pod_edits

KNOB = "POD_HOOK_PREPARE_JOB"

EDITS = [
    ({"Cmd": "/bin/sh"}, PodEdits(command=["/bin/sh"])),
    ({"Arguments": "-c 'echo two words'"}, PodEdits(args=["-c", "echo two words"])),
    ({"Arguments": ""}, PodEdits(args=[])),
    ({"Args": "-v  -x"}, PodEdits(args=["-v", "-x"])),
    # New syntax wins over old when both are given, as condor_submit's.
    ({"Arguments": "new", "Args": "old"}, PodEdits(args=["new"])),
    (
        {"Environment": "A=1 B='two words' C="},
        PodEdits(env={"A": "1", "B": "two words", "C": ""}),
    ),
    ({"Env": "A=1;B=x=y"}, PodEdits(env={"A": "1", "B": "x=y"})),
    ({"Env": "A=old;B=b", "Environment": "A=new"}, PodEdits(env={"A": "new", "B": "b"})),
    ({"Iwd": "/work"}, PodEdits(working_dir="/work")),
    ({"ContainerImage": "busybox:1.36"}, PodEdits(image="busybox:1.36")),
    # Attribute names are case-insensitive, as in ClassAds.
    ({"cmd": "/bin/true"}, PodEdits(command=["/bin/true"])),
    # Other attributes only update the job ad.
    ({"SiteTag": "x", "Priority": 3}, PodEdits()),
]


@pytest.mark.parametrize(("output", "expected"), EDITS)
def test_edits_a_pod_can_take(output: dict[str, Any], expected: PodEdits) -> None:
    assert pod_edits(output, knob=KNOB) == expected


REFUSED = [
    (
        {"In": "/data/in.txt"},
        'POD_HOOK_PREPARE_JOB set In = "/data/in.txt", which a pod job '
        "cannot take: a pod's container reads no input file",
    ),
    ({"Out": "out.txt"}, 'Out = "out.txt", which a pod job cannot take'),
    ({"Err": "err.txt"}, "writes its errors to its log"),
    (
        {"RequestCpus": 4},
        "RequestCpus = 4, which a pod job cannot take: the pod is sized by the "
        "slot the job was matched to",
    ),
    ({"requestmemory": 2048}, "requestmemory = 2048"),
    ({"TransferInputFiles": "a,b"}, "nothing is transferred to a pod"),
    ({"JobUniverse": 5}, "JobUniverse = 5"),
    ({"Cmd": 7}, "set Cmd = 7: expected a string"),
    ({"Cmd": ""}, 'set Cmd = "": expected the container\'s command'),
    ({"Arguments": True}, "set Arguments = True: expected a string"),
    ({"Arguments": "'unclosed"}, "POD_HOOK_PREPARE_JOB: Arguments"),
    ({"Environment": "NOEQUALS"}, "Environment: 'NOEQUALS' is not NAME=value"),
    ({"Env": "=1"}, "Env: '=1' is not NAME=value"),
    ({"ContainerImage": " "}, "expected an image"),
]


@pytest.mark.parametrize(("output", "says"), REFUSED)
def test_edits_a_pod_cannot_take_are_refused_naming_them(output: dict[str, Any], says: str) -> None:
    with pytest.raises(PodEditError) as refused:
        pod_edits(output, knob=KNOB)
    assert says in str(refused.value)
    assert str(refused.value).startswith(KNOB)


def _pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["/bin/false"],
                    "env": [
                        {"name": "GREETING", "value": "hi"},
                        {"name": "_CONDOR_JOB_AD", "value": "/etc/kondor/.job.ad"},
                    ],
                },
                {"name": "helper", "image": "sidecar", "env": [{"name": "GREETING", "value": "x"}]},
            ]
        },
    }


def test_the_edits_go_to_the_job_container_only() -> None:
    pod = _pod()
    edits = PodEdits(
        command=["/bin/sh"],
        args=["-c", "true"],
        env={"GREETING": "hello", "NEW": "1"},
        working_dir="/work",
        image="alpine",
    )
    edited = apply_pod_edits(pod, edits)
    main, helper = edited["spec"]["containers"]
    assert main["command"] == ["/bin/sh"] and main["args"] == ["-c", "true"]
    assert main["workingDir"] == "/work" and main["image"] == "alpine"
    # The hook's variables replace the template's of that name; Kondor's stay.
    assert main["env"] == [
        {"name": "_CONDOR_JOB_AD", "value": "/etc/kondor/.job.ad"},
        {"name": "GREETING", "value": "hello"},
        {"name": "NEW", "value": "1"},
    ]
    assert helper == _pod()["spec"]["containers"][1]
    assert pod == _pod()  # not changed in place


def test_no_edits_leave_the_pod_as_it_was() -> None:
    assert apply_pod_edits(_pod(), PodEdits()) == _pod()
    assert not PodEdits() and PodEdits(args=[])
