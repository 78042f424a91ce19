"""Scripts that run on a GPU machine; their results live in benchmarks/."""
