"""``governor drill CAUSE``: inject one cause of a latency SLO burn into the embedded stack and
show what a team would see — the alerts, the verdict, the controller's actions — ending on one
JSON line a script can score; ``governor drill all`` runs the matrix and scores it.

One module per idea: :mod:`.workload` (the traffic, as data), :mod:`.clients` (how one client
sends and reads), :mod:`.loadgen` (the load generator, a child process), :mod:`.catalog` (what
each drill injects), :mod:`.stack` (the stack of ``governor up`` on ports of its own),
:mod:`.observe` (what Prometheus, the alerts and the controller say), :mod:`.report` (the
timeline and the JSON line), :mod:`.score` (the matrix's score), :mod:`.run` (one drill),
:mod:`.matrix` (many), :mod:`.cli` (the command).
"""
