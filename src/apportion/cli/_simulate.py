"""`apportion simulate` — a seeded churn scenario on the deterministic simulator in any mode (``--mode``, as
``SimConfig.mode``); prints a summary."""

from __future__ import annotations

import json
import time

import click

from apportion.cli._app import app
from apportion.cli._common import (
    first_settle_option,
    max_in_flight_option,
    min_members_option,
    mode_option,
    rebalance_option,
    refuse_other_modes_options,
    seconds,
    spark_master,
    spark_options,
    strategy_option,
)
from apportion.cli._options import parse_options
from apportion.errors import InvalidRequest, SimulationFailed
from apportion.group import GroupConfig
from apportion.model import MAX_PARTITIONS
from apportion.sim import SimConfig
from apportion.sim import simulate as run_simulation

# Sizes beyond these would run for hours or exhaust memory (1,000 members x 100,000 partitions x 100 events: ~80 s).
MAX_MEMBERS = 10_000
MAX_EVENTS = 100_000


@app.command()
@click.option("--members", type=click.IntRange(0, MAX_MEMBERS), default=5, help="Members at the start.")
@click.option("--partitions", type=click.IntRange(1, MAX_PARTITIONS), default=20, help="Partitions of the resource.")
@click.option(
    "--resources",
    default=None,
    help="Several resources instead of --partitions (NAME:PARTITIONS,...): members get random subscriptions, which "
    "churn changes ('subscribe' events); rounds and coordinator modes.",
)
@click.option("--events", type=click.IntRange(0, MAX_EVENTS), default=20, help="Churn and fault events.")
@click.option("--seed", type=int, default=1, help="Seed of the one random generator (same seed, same trace).")
@strategy_option()
@mode_option()
@max_in_flight_option()
@min_members_option()
@rebalance_option()
@first_settle_option()
@click.option(
    "--start-gap",
    "start_gap_s",
    type=seconds(),
    default=0.0,
    help="Start the members this many seconds apart (a Deployment's pods), not at once.",
)
@click.option(
    "--replicas",
    type=click.IntRange(1, MAX_MEMBERS),
    default=None,
    help="static: the replica count the group starts with (default --members; above it, the missing ordinals' "
    "blocks wait for them).",
)
@click.option("--no-faults", is_flag=True, help="Only joins, leaves and crashes.")
@click.option("--stateful", is_flag=True, help="Stateful partitions: replicas restore in virtual time (seed 2).")
@click.option(
    "--option",
    "strategy_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="A strategy option (JSON value); repeatable.",
)
@click.option("--trace", "show_trace", is_flag=True, help="Print the trace, one JSON line per event.")
@click.option("--grid", "grid_file", type=click.Path(dir_okay=False), help="Grid file (JSON/TOML): run it on Spark.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Output directory of --grid.")
@spark_options("local[2]")
def simulate(
    members: int,
    partitions: int,
    resources: str | None,
    events: int,
    seed: int,
    strategy: str | None,
    mode: str,
    max_in_flight: int,
    min_members: int,
    rebalance: str,
    first_settle_s: float | None,
    start_gap_s: float,
    replicas: int | None,
    no_faults: bool,
    stateful: bool,
    strategy_options: tuple[str, ...],
    show_trace: bool,
    grid_file: str | None,
    out_dir: str | None,
    master: str | None,
    spark_url: str | None,
) -> None:
    """Simulate a group under churn and faults; print moves vs lower bound, unowned time, rounds, violations, and
    per change (the start, each churn or fault event) the plans it caused, their moves, the lower bound and the
    time until ownership stopped changing. --mode runs the members in that protocol (static: ordinals
    0..members-1, --replicas the count, default --members; coordinator: --min-members, --rebalance, manual meaning
    that a simulated operator runs `apportion rebalance` after each change, --max-in-flight, --first-settle);
    --start-gap starts the members that far apart (the start's moves then say what arriving one by one cost).
    With --grid: every scenario of the grid as a Spark task, one comparison table and chart in --out."""
    refuse_other_modes_options(click.get_current_context(), mode)
    if grid_file is not None:
        if mode != "rounds":
            raise InvalidRequest("--mode", 'a --grid picks its modes in the grid file ("modes": ["coordinator", ...])')
        from apportion.spark import simulate_grid

        grid_result = simulate_grid(grid_file, out_dir, spark_master(master, spark_url, "local[2]"))
        click.echo(json.dumps(grid_result.as_dict(), indent=2))
        if grid_result.failed:
            raise SimulationFailed(f"{grid_result.failed} scenario(s) violated a check: see {grid_result.table_csv}")
        return
    config = SimConfig(
        members=members,
        partitions=partitions,
        events=events,
        seed=seed,
        strategy=GroupConfig.default_strategy(mode) if strategy is None else strategy,
        mode=mode,
        max_in_flight=max_in_flight,
        min_members=min_members,
        rebalance=rebalance,
        first_settle_s=first_settle_s,
        start_gap_s=start_gap_s,
        replicas=replicas,
        faults=not no_faults,
        stateful=stateful,
        options=parse_options(strategy_options),
        resources=resources or "",
    )
    config.group_config()  # validates the mode, strategy and options before the run
    started = time.process_time()
    result = run_simulation(config)
    summary = result.summary()
    summary["cpu_s"] = round(time.process_time() - started, 3)
    if show_trace:
        for t, member, kind, detail in result.trace:
            click.echo(json.dumps({"t": t, "member": member, "event": kind, "detail": detail}))
    click.echo(json.dumps(summary, indent=2))
    if not result.ok:
        raise SimulationFailed(
            f"seed {seed} violated: {result.violations[0]} (replay: apportion simulate --seed {seed})"
        )
