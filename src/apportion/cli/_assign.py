"""`apportion assign` — placeholder until the strategies land (replaced by the assign work)."""
