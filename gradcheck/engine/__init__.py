"""The submission's side: a sandboxed worker process that imports the engine and answers requests
(gradients, graph, behaviour steps) in plain JSON, and torch behind the same protocol.

The worker imports only this package and `gradcheck.program`; the grader checks every reply.
"""
