"""How processes talk: the rollout data plane, CurveZMQ security, the weights RPC client."""
