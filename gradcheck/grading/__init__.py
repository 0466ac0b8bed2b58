"""Grading: each check of an exercise asked of the worker and the oracles, compared, scored, and
a failure traced to the first operation that goes wrong; answer keys; the helper process and the
threads that run the oracles beside the worker.
"""
