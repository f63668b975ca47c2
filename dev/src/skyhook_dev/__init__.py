"""Development tools around the operator, never shipped in its image: the sandbox demo
(demo.py, progress.py), the harness tests and benchmarks run the operator with (harness.py),
and an in-memory cluster that applies plans for planner tests and benchmarks (simulate.py)."""
