"""`kpdiag cluster`: one short-lived pod per node (pods.py), run and read through the API (runner.py), the node
reports made one (aggregate.py), the command (cluster_cmd.py)."""
