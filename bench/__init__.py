"""The benchmarks: perf/ (speed, CPU and memory beside a baseline), accuracy/ (paper replications and reference
implementations), studies/ (investigations behind a design choice). Run from the repository root as modules,
``python -m bench.perf.decoder_refresh``; not part of the installed package (bench/README.md)."""
