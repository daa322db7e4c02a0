"""Foundations every layer may use: errors, atomic writes, file identity and claims, memory, JSON from
users, the heartbeat, CPU calibration and the kernel backend."""
