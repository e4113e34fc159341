"""Speed and memory benchmarks, outside the installed package (run from the repository root)."""
