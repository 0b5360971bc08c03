"""Batch sweeps: grids, executors, resumable result store."""
