#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image: it installs gradcheck
# (as requirements.txt says) into a virtual environment of its own, which run_autograder uses.
# Written by `gradcheck bundle gradescope`. GRADCHECK_AUTOGRADER_ROOT (default /autograder) moves
# the whole layout, for trying the bundle outside Gradescope.
set -euo pipefail
root="${GRADCHECK_AUTOGRADER_ROOT:-/autograder}"
cd "$root/source"

python=""
for candidate in python3.13 python3.12 python3.11 python3; do
  if command -v "$candidate" >/dev/null 2>&1 \
      && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    python="$candidate"
    break
  fi
done
if [ -z "$python" ]; then  # Gradescope's Ubuntu 22.04 images have Python 3.10 only
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y python3.11 python3.11-venv
  python=python3.11
fi
if ! "$python" -m venv "$root/venv"; then  # Debian and Ubuntu ship venv's pip separately
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y "$python-venv"
  "$python" -m venv "$root/venv"
fi
"$root/venv/bin/python" -m pip install --upgrade pip
"$root/venv/bin/python" -m pip install -r requirements.txt
"$root/venv/bin/python" -m gradcheck --version
