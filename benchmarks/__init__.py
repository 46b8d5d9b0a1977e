"""Benchmarks of pymc-dp against PyMC's non-private samplers on the same model.

Run ``python -m benchmarks`` (``make bench``); ``--quick`` is a smoke run. Results are printed as
plain-text tables of milliseconds and DP / non-DP ratios.
"""
