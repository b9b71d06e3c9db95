"""Hardware truth: the Jetson sysfs backend, nvpmodel, tegrastats, jtop and the twin."""

from engine.device.base import (
    ClockDomain,
    ClockState,
    Device,
    DeviceIdentity,
    DeviceSettings,
    DomainSettings,
    PowerMode,
    RailReading,
    TemperatureReading,
)

__all__ = [
    "ClockDomain",
    "ClockState",
    "Device",
    "DeviceIdentity",
    "DeviceSettings",
    "DomainSettings",
    "PowerMode",
    "RailReading",
    "TemperatureReading",
]
