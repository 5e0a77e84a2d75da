"""A class-data-sharing archive of Spark's classes for the test run's Spark JVMs (JDK's AppCDS, dynamic archive).

Every Spark JVM make test starts (the local session, the Connect servers, the standalone cluster's daemons and
executors, pipeline workers with JVMs of their own) loads and verifies the same ~20,000 classes from pyspark's jars.
Mapped from an archive instead, a local session's start took 11 CPU-s instead of 18-20, and a Connect server's start
and first session 23 instead of 38 (tests/cpurun's cgroup, 2026-11-29, this 2-core machine). The JVMs run as they would
without it: only where their classes come from differs.

``start_dump()`` (the controlling pytest process, once per run) writes the archive in the background when it is
missing: one small local session with ``-XX:ArchiveClassesAtExit`` (~50 CPU-s, once per pyspark, Java and
environment: the archive names the jars' paths). It runs beside the first tests; a JVM started before it is done runs
without the archive, one started after maps it. ``options()`` are the JVM flags that use it, silenced: a JVM whose
class path does not match (Kafka's tools, say) or a missing file runs as before, with no warning on its output.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

STALE_LOCK_S = 900.0
DUMP_WORKLOAD = """
from apportion.spark.engine._session import spark_session
spark = spark_session("local[1]", "512m", "apportion-jvm-archive", parallelism=1)
frame = spark.range(2000).selectExpr("id % 7 AS k", "id AS v", "sha2(cast(id AS string), 256) AS h")
frame.groupBy("k").count().collect()
frame.write.mode("overwrite").parquet(__import__("sys").argv[1])
spark.read.parquet(__import__("sys").argv[1]).count()
spark.stop()
"""


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


@functools.cache  # once per process: the autouse fixture asks before every test
def archive_path() -> Path | None:
    """Where this environment's archive lives (None without Java or pyspark, or with ``APPORTION_JVM_ARCHIVE=0``):
    keyed by the jars (their directory, names, sizes and times), the pyspark version and the Java binary, each of
    which the archive depends on."""
    if os.environ.get("APPORTION_JVM_ARCHIVE") == "0":  # off: every JVM loads its classes from the jars
        return None
    java = _java()
    spec = importlib.util.find_spec("pyspark")  # found, not imported
    if java is None or spec is None or not spec.submodule_search_locations:
        return None
    jars = (Path(next(iter(spec.submodule_search_locations))) / "jars").resolve()
    version = importlib.metadata.version("pyspark")
    # the JVM checks each jar's size and time against the archive's record: a reinstalled pyspark needs a new one
    files = sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in jars.glob("*.jar"))
    stat = java.stat()
    key = f"{jars}|{files}|{version}|{java}|{stat.st_size}|{stat.st_mtime_ns}"
    digest = hashlib.sha1(key.encode()).hexdigest()[:16]
    root = Path(os.environ.get("APPORTION_JVM_ARCHIVE_DIR") or Path.home() / ".cache" / "apportion" / "jvm")
    return root / f"spark-{version}-{digest}.jsa"


def options() -> str:
    """The JVM flags that map the archive when it exists ('' otherwise)."""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off"


def start_dump(jvm_options: str) -> None:
    """Write the archive in the background unless it exists or another run is writing it (a lock file)."""
    path = archive_path()
    if path is None or path.is_file():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_suffix(".lock")
    try:
        if time.time() - lock.stat().st_mtime > STALE_LOCK_S:
            lock.unlink(missing_ok=True)
    except FileNotFoundError:
        pass
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    subprocess.Popen(
        [sys.executable, "-m", "tests.jvm_archive", str(path), jvm_options],
        cwd=Path(__file__).resolve().parent.parent,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _dump(path: Path, jvm_options: str) -> None:
    """The background process: the workload on a JVM that writes the archive at its exit, then the archive moved
    into place whole (a JVM never maps a half-written file); the lock removed either way."""
    partial = path.with_suffix(f".{os.getpid()}.partial")
    scratch = path.with_suffix(f".{os.getpid()}.parquet")
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{jvm_options} -XX:ArchiveClassesAtExit={partial}"}
    try:
        done = subprocess.run([sys.executable, "-c", DUMP_WORKLOAD, str(scratch)], env=env, timeout=600,
                              capture_output=True, check=False)  # fmt: skip
        if done.returncode == 0 and partial.is_file() and partial.stat().st_size > 0:
            os.replace(partial, path)
            _prune(path.parent)
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)
        path.with_suffix(".lock").unlink(missing_ok=True)


KEEP = 3  # archives kept: each is ~170 MB and names one environment's jars, so every fresh clone writes its own


def _prune(directory: Path) -> None:
    """Delete all but the ``KEEP`` newest archives: those of environments gone or reinstalled since. A JVM that maps
    a deleted one keeps its mapping; a later one of that environment runs without (``options``)."""
    archives = sorted(directory.glob("spark-*.jsa"), key=lambda f: f.stat().st_mtime, reverse=True)
    for stale in archives[KEEP:]:
        stale.unlink(missing_ok=True)


if __name__ == "__main__":
    _dump(Path(sys.argv[1]), sys.argv[2])
