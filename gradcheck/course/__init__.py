"""The course tools around the pipeline: a new course folder, bank validation, the Gradescope and
Classroom bundles, batch grading with a gradebook, and mutation testing of a bank.
"""
