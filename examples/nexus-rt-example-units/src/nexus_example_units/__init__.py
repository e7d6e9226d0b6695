"""An example Nexus tool plugin: `convert`, which converts a length or a weight between units.

The one plugin shape: a class (the entry point names it, so each Nexus makes its own) whose
settings are an attrs class; its config section, `plugins.nexus.example.units`, is checked
against the schema derived from that class.
"""

from typing import Any, Literal

import attrs

from nexus_core import failure, hookimpl, tool
from nexus_core.plugins import Plugin, setting

Unit = Literal["mm", "cm", "m", "km", "in", "ft", "yd", "mi", "g", "kg", "oz", "lb"]

#: how many metres (lengths) or grams (weights) one unit is
LENGTH = {"mm": 0.001, "cm": 0.01, "m": 1.0, "km": 1000.0, "in": 0.0254, "ft": 0.3048, "yd": 0.9144, "mi": 1609.344}
WEIGHT = {"g": 1.0, "kg": 1000.0, "oz": 28.349523125, "lb": 453.59237}


@attrs.frozen
class UnitsSettings:
    digits: int = setting(6, minimum=1, maximum=15, description="significant digits of a converted value")


class UnitsPlugin(Plugin[UnitsSettings]):
    NEXUS_PLUGIN_ID = "nexus.example.units"

    @hookimpl
    def nexus_register_tools(self, register: Any) -> None:
        digits = self.settings.digits

        @tool
        def convert(value: float, from_unit: Unit, to_unit: Unit) -> object:
            """Convert a length or a weight from one unit to another.

            Args:
                value: the amount to convert
                from_unit: the unit `value` is in
                to_unit: the unit wanted
            """
            for table in (LENGTH, WEIGHT):
                if from_unit in table and to_unit in table:
                    converted = value * table[from_unit] / table[to_unit]
                    return f"{value:g} {from_unit} = {converted:.{digits}g} {to_unit}"
            return failure(f"cannot convert {from_unit} to {to_unit}: one is a length, the other a weight")

        register(convert)
