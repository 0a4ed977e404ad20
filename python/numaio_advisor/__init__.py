"""numaio_advisor: configuration advice for numaio learned from measured runs.

Bang's method (clustering I/O profiles, then per-cluster regression of throughput from the
settable parameters, then a grid search) applied to node-local settings: data path, engine
policy, placement, work moving, threads, cache block size and cache size.
"""

__version__ = "0.1.0"
