"""The gate's own tests, on the fixtures nexus-rt-core ships for plugin authors (pytest11)."""

from nexus_core import native_tool
from nexus_core.testing import assert_ok, assert_vetoed
from nexus_example_gate import DenyGate

convert = native_tool("convert", "Convert a length.", {"type": "object"}, lambda args: "done")


def test_denied_values_are_vetoed_and_the_rest_pass(nexus_factory):
    nx = nexus_factory(plugins=[DenyGate], tools=[convert],
                       config={"plugins": {"nexus.example.gate": {"deny": {"convert": {"to_unit": ["mi"]}}}}})
    assert_vetoed(nx.invoke("convert", {"to_unit": "mi"}), "to_unit='mi' is denied for convert")
    assert_ok(nx.invoke("convert", {"to_unit": "km"}), "done")


def test_two_nexus_in_one_process_keep_their_own_policy(nexus_factory):
    metric = nexus_factory(plugins=[DenyGate], tools=[convert],
                           config={"plugins": {"nexus.example.gate": {"deny": {"convert": {"to_unit": ["mi"]}}}}})
    imperial = nexus_factory(plugins=[DenyGate], tools=[convert],
                             config={"plugins": {"nexus.example.gate": {"deny": {"convert": {"to_unit": ["km"]}}}}})
    assert_vetoed(metric.invoke("convert", {"to_unit": "mi"}))
    assert_ok(metric.invoke("convert", {"to_unit": "km"}))
    assert_vetoed(imperial.invoke("convert", {"to_unit": "km"}))
    assert_ok(imperial.invoke("convert", {"to_unit": "mi"}))


def test_without_config_it_denies_nothing(nexus_factory):
    nx = nexus_factory(plugins=[DenyGate], tools=[convert])
    assert_ok(nx.invoke("convert", {"to_unit": "mi"}))
