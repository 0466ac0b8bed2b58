"""The program language: the one table of operations and the parser and interpreter built on it,
and the bounded memos the stages keep of what they build from the same objects again (memo.py).

Everything later in the pipeline speaks this language: an exercise's program, the oracles, the
worker that runs a submission, the reference engine's tests. It needs the standard library only,
so the worker can import it under `python -I -S`.
"""
