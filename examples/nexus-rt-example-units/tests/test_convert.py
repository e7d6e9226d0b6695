"""The plugin's own tests, on the fixtures nexus-rt-core ships for plugin authors (pytest11)."""

from nexus_core.testing import assert_error, assert_ok
from nexus_example_units import UnitsPlugin


def test_converts_lengths_and_weights(nexus_factory):
    nx = nexus_factory(plugins=[UnitsPlugin])
    assert_ok(nx.invoke("convert", {"value": 3, "from_unit": "mi", "to_unit": "km"}), "3 mi = 4.82803 km")
    assert_ok(nx.invoke("convert", {"value": 2.5, "from_unit": "kg", "to_unit": "lb"}), "2.5 kg = 5.51156 lb")
    fewer = nexus_factory(plugins=[UnitsPlugin], config={"plugins": {"nexus.example.units": {"digits": 2}}})
    assert_ok(fewer.invoke("convert", {"value": 3, "from_unit": "mi", "to_unit": "km"}), "3 mi = 4.8 km")


def test_length_to_weight_is_a_failure_the_model_reads(nexus_factory):
    nx = nexus_factory(plugins=[UnitsPlugin])
    assert_error(nx.invoke("convert", {"value": 1, "from_unit": "m", "to_unit": "kg"}),
                 "one is a length, the other a weight", kind="failure")


def test_an_unknown_unit_is_refused_before_the_tool_runs(nexus_factory):
    nx = nexus_factory(plugins=[UnitsPlugin])
    assert_error(nx.invoke("convert", {"value": 1, "from_unit": "m", "to_unit": "furlong"}),
                 "to_unit: expected one of", kind="invalid_arguments")
