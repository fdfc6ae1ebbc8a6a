"""The Loam host agent: reports the inventory and telemetry of a server's accelerators."""

__version__ = "0.1.0"
