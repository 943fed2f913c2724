"""Benchmarks of signoff against plain Huey on this machine; not part of the package.

``python -m bench --help`` from the repository's root. Each run measures its
baseline in the same run, so every figure comes with the ratio that matters.
"""
