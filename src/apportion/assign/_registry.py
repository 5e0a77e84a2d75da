"""Strategy name -> function ``AssignRequest -> Plan``. A new strategy registers with one line here."""

from __future__ import annotations

from collections.abc import Callable

from apportion.assign._hashing import bounded_load, rendezvous
from apportion.assign._high_availability import high_availability, parse_options
from apportion.assign._simple import range_, round_robin
from apportion.assign._sticky import sticky
from apportion.assign._weighted import weighted
from apportion.errors import InvalidRequest
from apportion.model import AssignRequest, Plan

Strategy = Callable[[AssignRequest], Plan]

STRATEGIES: dict[str, Strategy] = {
    "round_robin": round_robin,
    "range": range_,
    "sticky": sticky,
    "weighted": weighted,
    "rendezvous": rendezvous,
    "bounded_load": bounded_load,
    "high_availability": high_availability,
}


def _fraction(value: object) -> tuple[bool, str]:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1
    return ok, "must be a number in [0, 1]"


def _load_factor(value: object) -> tuple[bool, str]:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 1 <= value < float("inf")
    return ok, "must be a number >= 1"


def _vnodes(value: object) -> tuple[bool, str]:
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 4096
    return ok, "must be an integer in [1, 4096]"


def _high_availability_option(name: str) -> Callable[[object], tuple[bool, str]]:
    """Validate one high-availability option with that strategy's own parser (one source of truth)."""

    def check(value: object) -> tuple[bool, str]:
        try:
            parse_options({name: value})
        except InvalidRequest as exc:
            return False, exc.reason.rsplit(", got", 1)[0]
        return True, ""

    return check


OPTIONS: dict[str, Callable[[object], tuple[bool, str]]] = {
    "tolerance": _fraction,
    "load_factor": _load_factor,
    "vnodes": _vnodes,
    **{
        name: _high_availability_option(name)
        for name in (
            "num_standby_replicas",
            "max_warmup_replicas",
            "acceptable_recovery_lag",
            "probing_rebalance_interval_s",
            "imbalance",
        )
    },
}
"""Option name -> validator (ok, reason); ``apportion assign`` rejects options not listed here."""
