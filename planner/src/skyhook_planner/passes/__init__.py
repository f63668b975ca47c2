"""One pass, `plan(snapshot, settings) -> Plan` (plan.py), and the steps it is built from."""
