"""The shipped deployment run on this machine, for benchmarks and tests alike: the compose
file as Compose resolves it, each service's env from compose or k8s, a real Docker engine,
and network hosts in namespaces (with the scaling measurement across them)."""
