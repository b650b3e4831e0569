"""The Dask linker: a graph over chunked arrays lowered to a Dask graph.

``linker.py`` (the linker, its thunk: arguments to Dask arrays, shared
variables sent once per call, updates computed), ``lower.py`` (the op table:
each op class to its Dask lowering), ``chunks.py`` (the per-chunk kernels,
compiled by tenure once per worker process).  Imported only when a mode
names the dask linker: Dask is an optional dependency (``[dask]`` extra).
"""
