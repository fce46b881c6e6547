"""The operator's Node table: which metadata events change what the planner sees."""

from __future__ import annotations

from kondor_core.fleet import NodeFacts, NodeTable, node_facts


def facts(name: str, uid: str = "u1", **labels: str) -> NodeFacts:
    return NodeFacts(name, uid, labels)


def test_only_events_that_change_labels_or_identity_matter() -> None:
    table = NodeTable()
    assert table.apply("ADDED", facts("n", pool="a"))
    assert not table.apply("MODIFIED", facts("n", pool="a"))  # a status heartbeat
    assert table.apply("MODIFIED", facts("n", pool="b"))
    assert table.apply("MODIFIED", facts("n", uid="u2", pool="b"))  # the same name, a new node
    assert table.apply("DELETED", facts("n", uid="u2", pool="b"))
    assert not table.apply("DELETED", facts("n"))


def test_a_relisting_reports_what_changed_and_what_is_gone() -> None:
    table = NodeTable()
    assert table.relist([facts("a"), facts("b")]) == {"a": facts("a"), "b": facts("b")}
    changed = table.relist([facts("a"), facts("b", pool="x"), facts("c")])
    assert changed == {"b": facts("b", pool="x"), "c": facts("c")}
    assert table.relist([facts("c")]) == {"a": None, "b": None}


def test_facts_come_from_partial_object_metadata() -> None:
    metadata = {
        "name": "n1",
        "uid": "u",
        "labels": {"kubernetes.io/os": "linux"},
        "resourceVersion": "7",
        "managedFields": [{"manager": "kwok"}],
    }
    assert node_facts(metadata) == NodeFacts("n1", "u", {"kubernetes.io/os": "linux"})
    assert node_facts({"uid": "u"}) is None
