"""Foundations every layer may use: errors, atomic writes, file identity and claims, memory, JSON from
users, the heartbeat and the kernel backend."""
