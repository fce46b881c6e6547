"""Chart defaults that decide whether the pods run at all, found by installing the chart on the
dev cluster's real node (tests/integration/test_helm.py does it for real)."""

from __future__ import annotations

from pathlib import Path

import pytest
from chart_support import CHART, find, render


@pytest.mark.parametrize("kind", ["Deployment", "DaemonSet"])
def test_pods_get_no_service_link_variables_kondor_would_read_as_settings(
    helm: Path, kind: str
) -> None:
    # The kubelet's Docker-link variables for the Service `<release>-webhook` of a release named
    # `kondor` are KONDOR_WEBHOOK_PORT=tcp://...: the operator read it as its port and died.
    objects = render(helm, crds=False, release="kondor")
    pod = find(objects, kind)["spec"]["template"]["spec"]
    assert pod["enableServiceLinks"] is False


def test_the_dev_cluster_values_keep_kondor_to_the_real_node(helm: Path) -> None:
    values = CHART.parents[1] / "examples" / "demo" / "helm-values.yaml"
    objects = render(helm, "-f", str(values), crds=False)
    for kind in ("Deployment", "DaemonSet"):
        selector = find(objects, kind)["spec"]["template"]["spec"]["nodeSelector"]
        assert selector["kondor.io/real-node"] == "true", kind
    assert {
        c["imagePullPolicy"]
        for c in find(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    } == {"IfNotPresent"}


def test_the_leader_lease_belongs_to_the_release_so_uninstall_removes_it(helm: Path) -> None:
    objects = render(helm, crds=False, release="kondor")
    lease = find(objects, "Lease")
    assert lease["metadata"]["name"] == "kondor-operator"  # operator.leaderElection.lease
    assert lease["metadata"]["labels"]["app.kubernetes.io/instance"] == "kondor"
    assert lease["spec"] == {}  # the operators write the holder, never the chart
    without = render(helm, "--set=operator.leaderElection.enabled=false", crds=False)
    assert not [o for o in without if o["kind"] == "Lease"]


def test_an_agent_that_does_not_carry_jobs_out_makes_no_job_cgroups(helm: Path) -> None:
    # Without agent.execution the host's cgroups are read-only in the pod: an agent that found
    # the default root (/kondor) on its node tried to create job cgroups there, and held jobs.
    def agent_args(*values: str) -> list[str]:
        daemonset = find(render(helm, *values, crds=False), "DaemonSet")
        return list(daemonset["spec"]["template"]["spec"]["containers"][0]["args"])

    assert "--cgroup-root=" in agent_args()
    executing = agent_args("--set=agent.execution.enabled=true")
    assert "--cgroup-root=/kondor" in executing and "--cgroup-root=" not in executing
