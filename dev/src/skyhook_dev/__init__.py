"""Development tools around the operator, never shipped in its image: the sandbox demo
(demo.py, progress.py), the harness tests and benchmarks run the operator with (harness.py),."""
