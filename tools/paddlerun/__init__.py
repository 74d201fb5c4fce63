"""paddlerun: the torchrun-style launcher of Paddle Collective, as a library.

The modules, from the bottom up:
  options     the command line (every option, the environment contract, --help)
  labels      which binary a Bazel label runs: its -c opt --config=opt build (Note [Optimized
              labels])
  kvstore     the key-value stores the node agents meet in: a TCP store hosted by one launcher,
              a shared directory, or etcd's v3 JSON gateway
  rendezvous  the node-level rendezvous on such a store: which nodes form the next attempt, their
              group ranks, MASTER_ADDR/MASTER_PORT for the workers (Note [Node rendezvous])
  logs        rank-prefixed console lines, one log file per rank, --tee, --local-ranks-filter
  agent       spawns, monitors, stops and restarts the workers of one node
  dashboard   --dashboard: the workers' metrics gathered over UDP, served as Prometheus text and a
              live page (Note [Metrics hub])
  main        the entry point of `bazel run //tools:launch` and of the installed `paddlerun`
"""
