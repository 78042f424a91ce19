"""What every generator shares: the checked spec, the stack's addresses and intervals, and
generated files as YAML text and on disk."""
