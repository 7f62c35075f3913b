"""Speed, CPU and memory of ldpstream beside a baseline: another revision, another library or a bare loop."""
