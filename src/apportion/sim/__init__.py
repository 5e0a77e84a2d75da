"""Deterministic simulator: many members on the memory store in virtual time, seeded faults, checked traces."""

from apportion.sim._checks import check_trace
from apportion.sim._sim import FAULTS, SimConfig, SimResult, Simulation, simulate

__all__ = ["FAULTS", "SimConfig", "SimResult", "Simulation", "check_trace", "simulate"]
