"""`python -m gradcheck`: the same command as `gradcheck`."""

from gradcheck.cli import command

command()
