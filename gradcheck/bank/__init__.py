"""The exercise bank: YAML files read with their line numbers, checked against the format's models,
and loaded with the cross-checks no schema can express; the input domains points are drawn from.
"""
