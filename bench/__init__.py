"""The benchmarks (make bench, make bench-postgres, make bench-peers). See docs/benchmarks.md."""
