"""Node labels as machine attributes.

The rule: `K8sLabel_` followed by the label key with every character that cannot
appear in a ClassAd attribute name (anything but letters, digits and `_`) replaced
by `_`; the value is the label's value as a string, unchanged.

    kubernetes.io/arch: amd64
        -> K8sLabel_kubernetes_io_arch = "amd64"
    node.kubernetes.io/instance-type: m5.large
        -> K8sLabel_node_kubernetes_io_instance_type = "m5.large"
    nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB
        -> K8sLabel_nvidia_com_gpu_product = "NVIDIA-A100-SXM4-40GB"

ClassAd attribute names are case-insensitive, so two keys that differ only in
case or punctuation (`a.b` and `a-b`) would make the same attribute: the first key
in sorted order wins and the others are reported in the returned list of
collisions (the agent logs them); nothing is dropped without a word. Values are
not converted (`"true"` stays a string), because a label's value is a string in
Kubernetes and a policy must be able to rely on that.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PREFIX = "K8sLabel_"
_NOT_NAME = re.compile(r"[^A-Za-z0-9_]")


def label_attribute(key: str) -> str:
    """The attribute name of a label key."""
    return PREFIX + _NOT_NAME.sub("_", key)


def label_attributes(labels: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The attributes for `labels`, and a message for each key that collided with another."""
    attributes: dict[str, str] = {}
    owner: dict[str, str] = {}
    collisions: list[str] = []
    for key in sorted(labels):
        name = label_attribute(key)
        folded = name.lower()
        if folded in owner:
            collisions.append(
                f"label {key!r} is not advertised: its attribute {name} is already "
                f"{label_attribute(owner[folded])} from the label {owner[folded]!r}"
            )
            continue
        owner[folded] = key
        attributes[name] = labels[key]
    return attributes, collisions
