"""Exports: schedule files, PyTorch CSV, Chrome traces."""
