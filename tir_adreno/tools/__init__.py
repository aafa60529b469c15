"""The compiler engineer's tools: the TVMScript workbench, the kernel tour, the upstream baseline."""
