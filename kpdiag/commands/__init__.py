"""The commands as library functions: the pipeline (pipeline.py) over diagnose.py (state → report) and focus.py,
`kpdiag svc` (svc.py), `kpdiag policy` (policy.py), `kpdiag node` with the API (nodeapi.py), what `kpdiag trace`
reads (trace.py). The CLI (kpdiag/cli/) only parses options and renders what these return."""
