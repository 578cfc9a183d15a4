"""Task 3.3: point-parallel over query-block, the ratio upside down."""


def tiling_speedup(n_queries=256, D=32, itemsize=2, seed=0):
    qb = msda_query_block(n_queries=n_queries, D=D, itemsize=itemsize, seed=seed)  # noqa: F821
    pp = msda_point_parallel(n_queries=n_queries, D=D, itemsize=itemsize, seed=seed)  # noqa: F821
    return efficiency(pp) / efficiency(qb)  # noqa: F821
