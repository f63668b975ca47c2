"""An in-memory cluster that applies plans, and the forecast built on it: for `kubectl skyhook
plan`, tests and benchmarks. The operator never imports this package."""
