"""``run_grid``: a grid of simulator scenarios (strategy x members x partitions x churn x seed), one Spark task each,
gathered into one table and one chart that compares strategies.

Grid file (JSON, or TOML by its ``.toml`` suffix)::

    {"strategies": ["sticky", "round_robin"], "members": [3, 8], "partitions": [16, 64], "churn": [5, 20],
     "seeds": [1, 2], "faults": true, "modes": ["rounds", "coordinator"]}

``modes`` (default ``["rounds"]``) picks the protocols (``SimConfig.mode``; a static scenario ignores its
strategy: the range formula decides). ``churn`` is the simulator's number of churn/fault events
(``SimConfig.events``); ``faults`` (default true) adds
freezes, slow revocations, store outages and clock drift to joins, leaves and crashes. Missing keys take the value
of ``DEFAULT_GRID`` (about a minute on 2 cores). Writes into ``out_dir``: ``scenarios.parquet/.csv`` (one row per
run), ``comparison.parquet/.csv`` (per mode x strategy x members x partitions x churn, averaged over seeds),
``comparison.png`` and ``index.html``.
"""

from __future__ import annotations

import itertools
import json
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apportion.errors import InvalidRequest
from apportion.spark.engine import default_parallelism

GRID_SCHEMA = (
    "mode STRING, strategy STRING, members INT, partitions INT, churn INT, seed INT, faults BOOLEAN, rounds INT, "
    "moves INT, moves_lower_bound INT, plans INT, settle_s_max DOUBLE, max_load INT, min_load INT, "
    "unowned_partition_s DOUBLE, virtual_s DOUBLE, steps INT, fault_events INT, violations INT, "
    "first_violation STRING, ok BOOLEAN, cpu_s DOUBLE"
)


@dataclass(frozen=True, slots=True)
class Grid:
    """The axes of a grid; every combination is one scenario."""

    strategies: tuple[str, ...]
    members: tuple[int, ...]
    partitions: tuple[int, ...]
    churn: tuple[int, ...]
    seeds: tuple[int, ...]
    faults: bool = True
    modes: tuple[str, ...] = ("rounds",)

    def scenarios(self) -> list[dict[str, Any]]:
        """Every combination, in a fixed order (mode, strategy, members, partitions, churn, seed)."""
        return [
            {
                "mode": mode,
                "strategy": s,
                "members": m,
                "partitions": p,
                "churn": c,
                "seed": seed,
                "faults": self.faults,
            }
            for mode, s, m, p, c, seed in itertools.product(
                self.modes, self.strategies, self.members, self.partitions, self.churn, self.seeds
            )
        ]


DEFAULT_GRID = Grid(
    strategies=("sticky", "round_robin", "range", "rendezvous"),
    members=(3, 8),
    partitions=(16, 64),
    churn=(5, 20),
    seeds=(1, 2),
)
_AXES = ("modes", "strategies", "members", "partitions", "churn", "seeds")


def parse_grid(data: Mapping[str, Any]) -> Grid:
    """Validate a grid mapping (missing axes from ``DEFAULT_GRID``); raises ``InvalidRequest`` naming the field."""
    from apportion.assign import STRATEGY_NAMES
    from apportion.group.internals import MODES

    if not isinstance(data, Mapping):
        raise InvalidRequest("grid", "must be an object with the keys " + ", ".join(_AXES))
    unknown = sorted(set(data) - {*_AXES, "faults"})
    if unknown:
        raise InvalidRequest(unknown[0], "unknown grid key (use " + ", ".join((*_AXES, "faults")) + ")")
    axes: dict[str, tuple[Any, ...]] = {}
    for name in _AXES:
        values = data.get(name, getattr(DEFAULT_GRID, name))
        if not isinstance(values, list | tuple) or not values:
            raise InvalidRequest(name, "must be a non-empty list")
        if name == "strategies":
            for v in values:
                if v not in STRATEGY_NAMES:
                    raise InvalidRequest(name, f"unknown strategy {v!r} (known: {', '.join(STRATEGY_NAMES)})")
        elif name == "modes":
            for v in values:
                if v not in MODES:
                    raise InvalidRequest(name, f"unknown mode {v!r} (known: {', '.join(MODES)})")
        else:
            low = 0 if name in ("churn", "seeds") else 1
            for v in values:
                if isinstance(v, bool) or not isinstance(v, int) or v < low:
                    raise InvalidRequest(name, f"{v!r} is not an integer >= {low}")
        axes[name] = tuple(dict.fromkeys(values))  # drop repeats, keep order
    faults = data.get("faults", True)
    if not isinstance(faults, bool):
        raise InvalidRequest("faults", "must be true or false")
    return Grid(faults=faults, **axes)


def load_grid(path: str | Path) -> Grid:
    """Read a grid file: JSON, or TOML when the name ends with ``.toml``."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise InvalidRequest("grid", f"cannot read {p}: {exc.strerror}") from exc
    try:
        data = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequest("grid", f"{p} is not valid {'TOML' if p.suffix == '.toml' else 'JSON'}: {exc}") from exc
    return parse_grid(data)


def run_one(scenario: Mapping[str, Any]) -> tuple[Any, ...]:
    """One scenario on the simulator (runs inside a Spark task): a row of ``GRID_SCHEMA``."""
    from apportion.sim import SimConfig, Simulation

    config = SimConfig(
        mode=str(scenario.get("mode", "rounds")),
        members=int(scenario["members"]),
        partitions=int(scenario["partitions"]),
        events=int(scenario["churn"]),
        seed=int(scenario["seed"]),
        strategy=str(scenario["strategy"]),
        faults=bool(scenario["faults"]),
    )
    started = time.process_time()
    sim = Simulation(config)
    result = sim.run()
    loads = [len(s.member.owned()) for s in sim.members.values() if s.live]
    s = result.summary()
    return (
        config.mode,
        config.strategy,
        config.members,
        config.partitions,
        config.events,
        config.seed,
        config.faults,
        int(s["rounds"]),
        int(s["moves"]),
        int(s["moves_lower_bound"]),
        int(s["plans"]),
        float(s["settle_s_max"]),
        max(loads, default=0),
        min(loads, default=0),
        float(s["unowned_partition_s"]),
        float(s["virtual_s"]),
        int(s["steps"]),
        sum(int(v) for v in s["faults"].values()),
        len(s["violations"]),
        s["violations"][0] if s["violations"] else None,
        bool(s["ok"]),
        round(time.process_time() - started, 4),
    )


def run_scenarios(spark: Any, scenarios: Sequence[Mapping[str, Any]], slices: int) -> list[tuple[Any, ...]]:
    """Every scenario through ``run_one`` in ``slices`` Spark tasks; the rows in the scenarios' order.

    A DataFrame of the scenarios, spread round-robin over ``slices`` partitions, ``mapInArrow`` over them: no RDD,
    so it runs through Spark Connect too (there the tasks run in the server's Python workers, which must import
    apportion). Collected once, so no scenario runs twice."""
    frame = spark.createDataFrame([(i, json.dumps(s)) for i, s in enumerate(scenarios)], "i INT, scenario STRING")
    ran = frame.repartition(max(1, slices)).mapInArrow(_run_batch, f"i INT, {GRID_SCHEMA}")
    rows = sorted((tuple(r.values()) for r in ran.toArrow().to_pylist()), key=lambda r: r[0])
    return [r[1:] for r in rows]


def _run_batch(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` function: (i, scenario JSON) batches → (i, ``GRID_SCHEMA`` row) batches."""
    import pyarrow as pa

    arrow_types = {"STRING": pa.string(), "INT": pa.int32(), "BOOLEAN": pa.bool_(), "DOUBLE": pa.float64()}
    schema = pa.schema(
        [("i", pa.int32())] + [(n, arrow_types[t]) for n, t in (p.split() for p in GRID_SCHEMA.split(","))]
    )
    for batch in batches:
        rows = [(i, *run_one(json.loads(s))) for i, s in zip(*batch.to_pydict().values(), strict=True)]
        yield pa.RecordBatch.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema)


@dataclass(frozen=True, slots=True)
class GridResult:
    """Where ``run_grid`` wrote, how many scenarios ran and how many violated a check."""

    out_dir: str
    table_parquet: str
    table_csv: str
    comparison_parquet: str
    comparison_csv: str
    chart_png: str
    index_html: str
    scenarios: int
    failed: int
    wall_s: float

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def comparison(scenarios: Any) -> Any:
    """Per mode x strategy x members x partitions x churn, over seeds: runs, mean moves and lower bound,
    moves/bound (null when the strategy reports no lower bound, i.e. 0), the longest time to settle after a change,
    max of max_load, min of min_load, mean unowned partition-seconds, violations."""
    from pyspark.sql import functions as F

    keys = ["mode", "strategy", "members", "partitions", "churn"]
    return (
        scenarios.groupBy(*keys)
        .agg(
            F.count("*").alias("runs"),
            F.avg("moves").alias("moves"),
            F.avg("moves_lower_bound").alias("moves_lower_bound"),
            F.when(F.sum("moves_lower_bound") > 0, F.sum("moves") / F.sum("moves_lower_bound")).alias(
                "moves_over_bound"
            ),
            F.max("settle_s_max").alias("settle_s_max"),
            F.max("max_load").alias("max_load"),
            F.min("min_load").alias("min_load"),
            F.avg("unowned_partition_s").alias("unowned_partition_s"),
            F.sum("violations").alias("violations"),
        )
        .orderBy("members", "partitions", "churn", "mode", "strategy")
    )


def _plot(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    from apportion.spark.analytics._report import pyplot

    plt = pyplot()
    if len({r["mode"] for r in rows}) > 1:  # a grid over modes: one series per mode and strategy
        rows = [{**r, "strategy": f"{r['mode']} {r['strategy']}"} for r in rows]
    strategies = sorted({r["strategy"] for r in rows})
    labels = sorted({(r["members"], r["partitions"], r["churn"]) for r in rows})
    at = {key: i for i, key in enumerate(labels)}
    width = 0.8 / max(1, len(strategies))
    fig, (moves_ax, load_ax, unowned_ax) = plt.subplots(
        3, 1, figsize=(max(8.0, 1.1 * len(labels) + 3), 10), sharex=True
    )
    for j, strategy in enumerate(strategies):
        mine = [r for r in rows if r["strategy"] == strategy]
        xs = [at[(r["members"], r["partitions"], r["churn"])] - 0.4 + width * (j + 0.5) for r in mine]
        bars = moves_ax.bar(xs, [r["moves"] for r in mine], width=width, label=strategy)
        colour = bars.patches[0].get_facecolor() if bars.patches else None
        moves_ax.scatter(xs, [r["moves_lower_bound"] for r in mine], marker="_", s=200, color="black", zorder=3)
        load_ax.vlines(xs, [r["min_load"] for r in mine], [r["max_load"] for r in mine], color=colour, linewidth=4)
        load_ax.scatter(xs, [r["max_load"] for r in mine], marker="^", color=colour, s=20)
        load_ax.scatter(xs, [r["min_load"] for r in mine], marker="v", color=colour, s=20)
        unowned_ax.bar(xs, [r["unowned_partition_s"] for r in mine], width=width, color=colour)
    moves_ax.set_ylabel("moves (mean over seeds)")
    moves_ax.set_title("Strategies compared — black tick: lower bound of moves")
    moves_ax.legend(title="strategy", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    load_ax.set_ylabel("final load: min .. max")
    unowned_ax.set_ylabel("unowned partition-s")
    unowned_ax.set_xticks(range(len(labels)))
    unowned_ax.set_xticklabels([f"m{m} p{p} churn{c}" for m, p, c in labels], rotation=30, ha="right")
    for ax in (moves_ax, load_ax, unowned_ax):
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run_grid(spark: Any, grid: Grid, out_dir: str | Path, *, tasks: int | None = None) -> GridResult:
    """Run every scenario of ``grid`` as a Spark task (``tasks`` slices, default one per scenario up to
    ``defaultParallelism`` x 4) and write the tables, the chart and ``index.html`` into ``out_dir``."""
    from apportion.spark.analytics._report import html_page, write_table

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    scenarios = grid.scenarios()
    started = time.monotonic()
    slices = tasks if tasks is not None else min(len(scenarios), default_parallelism(spark) * 4)
    rows = run_scenarios(spark, scenarios, slices)
    runs = spark.createDataFrame(rows, GRID_SCHEMA).orderBy(
        "mode", "strategy", "members", "partitions", "churn", "seed"
    )
    table = write_table(runs, out, "scenarios")
    compared = write_table(comparison(runs), out, "comparison")
    wall_s = round(time.monotonic() - started, 3)
    chart = out / "comparison.png"
    _plot(chart, [dict(zip(compared.columns, r, strict=True)) for r in compared.rows])
    failed = sum(1 for r in rows if not r[GRID_COLUMNS.index("ok")])
    result = GridResult(
        out_dir=str(out),
        table_parquet=table.parquet,
        table_csv=table.csv,
        comparison_parquet=compared.parquet,
        comparison_csv=compared.csv,
        chart_png=str(chart),
        index_html=str(out / "index.html"),
        scenarios=len(scenarios),
        failed=failed,
        wall_s=wall_s,
    )
    page = html_page("apportion simulate --grid", result.as_dict(), [chart.name], [compared, table])
    Path(result.index_html).write_text(page)
    return result


def simulate_grid(grid_file: str | Path, out_dir: str | Path | None, master: str = "local[2]") -> GridResult:
    """``apportion simulate --grid FILE --out DIR``: load the grid, start Spark, run it."""
    if out_dir is None:
        raise InvalidRequest("--out", "is required with --grid")
    grid = load_grid(grid_file)
    from apportion.spark.engine import spark_session

    return run_grid(spark_session(master, app_name="apportion-grid"), grid, out_dir)


GRID_COLUMNS = tuple(part.strip().split(" ")[0] for part in GRID_SCHEMA.split(","))

__all__ = [
    "DEFAULT_GRID",
    "GRID_SCHEMA",
    "Grid",
    "GridResult",
    "comparison",
    "load_grid",
    "parse_grid",
    "run_grid",
    "simulate_grid",
]
