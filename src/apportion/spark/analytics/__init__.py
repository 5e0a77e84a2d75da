"""What happened, on Spark: the assignment history as tables (``_analytics``: ownership intervals, gaps, overlaps,
moves per round, balance, handoff latency), the report page with its plots (``_report``), and the simulator's grid
of scenarios as Spark tasks (``_grid``). Its names are faced by ``apportion.spark``, lazily: these modules import
pyspark or matplotlib."""
