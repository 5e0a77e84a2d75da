"""Deterministic simulator: many members on the memory store in virtual time, seeded faults, checked traces."""

from apportion.sim._checks import check_static, check_trace
from apportion.sim._sim import FAULTS, STATIC_CHURN, SimConfig, SimResult, Simulation, simulate

__all__ = ["FAULTS", "STATIC_CHURN", "SimConfig", "SimResult", "Simulation", "check_static", "check_trace", "simulate"]
