"""`kpdiag cluster`: one short-lived pod per node (pods.py), run and read through the API (runner.py) on a bounded set of
worker threads (pool.py), the node reports kept within one memory budget (budget.py) and made one (aggregate.py), the
command (cluster_cmd.py)."""
