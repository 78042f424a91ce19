"""What every generator shares: the checked spec, the stack's addresses and intervals, how much
each scrape may bring, and generated files as YAML text and on disk."""
