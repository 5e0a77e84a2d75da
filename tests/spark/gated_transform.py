"""A pipeline transform whose Spark tasks wait at a gate (``--transform tests.spark.gated_transform:gated``): the
tests' way to hold a Spark job mid-batch on an executor, deterministically, while they kill the Spark worker under it.

``$APPORTION_TEST_GATE`` names a directory. A task that meets a record (offset > 0: never the worker's one-record
warm-up) while ``<gate>/release`` does not exist creates ``<gate>/running-<pid>`` (pid: the executor's Python
worker) and waits for ``release``; once it exists, every task runs through. The UDF is defined inside ``gated`` so
that cloudpickle ships it by value: executors need not import this module.
"""

from __future__ import annotations

import os
from typing import Any


def gated(df: Any) -> Any:
    from pyspark.sql import functions as F

    from apportion.spark import transform

    gate = os.environ["APPORTION_TEST_GATE"]

    def hold(offset: int, value: str) -> str:
        import os
        import time

        release = os.path.join(gate, "release")
        if offset > 0 and not os.path.exists(release):
            open(os.path.join(gate, f"running-{os.getpid()}"), "w").close()  # the pid is in the name: no torn read
            while not os.path.exists(release):
                time.sleep(0.05)  # the test's gate: released by the test creating the file
        return value

    held = F.udf(hold, "string")
    return transform(df.withColumn("value", held("offset", "value")))
