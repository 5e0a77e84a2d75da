"""The pipeline: route records into the partitioned log (``_route``), process each owned partition in fenced
micro-batches (``_pipeline``; several resources in one loop: ``_resources``), read and verify only committed output
(``_output``), stateful partitions with standby and learner replicas over a fenced changelog (``_stateful``; the
local state store is the public ``apportion.spark.state``), one worker process as ``apportion pipeline run`` runs it
(``_worker``) from one typed request (``_request``). Its names are faced by ``apportion.spark``, lazily: these
modules import pyspark."""
