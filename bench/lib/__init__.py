"""What the benchmarks share, and the tests that check a benchmark's workload: the
process helpers (proc.py), the synthetic cluster of the dashboard benchmarks
(dashboards_data.py), the detection corpus (corpus/) and how the detection benchmarks
read a verdict (verdicts.py). Benchmarks and tests import
them as `bench.lib.<module>`, with the repository root on the path."""
