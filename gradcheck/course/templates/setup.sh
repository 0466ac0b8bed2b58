#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image: it installs gradcheck
# (as requirements.txt says: by default the gradcheck wheel beside it) into a virtual environment
# of its own, which run_autograder uses. Written by `gradcheck bundle gradescope`.
#
# Run as root, run_autograder runs students' code as uid GRADCHECK_WORKER_USER (default @USER@,
# from the course's gradcheck.toml; `none`: as root), so the virtual environment is made from a
# Python that user may run, and setup checks that it can, rather than failing at grading time.
#
# GRADCHECK_AUTOGRADER_ROOT (default /autograder) moves the whole layout, for trying the bundle
# outside Gradescope; GRADCHECK_SETUP_PYTHON names the Python to make the environment from.
set -euo pipefail
root="${GRADCHECK_AUTOGRADER_ROOT:-/autograder}"
user="${GRADCHECK_WORKER_USER:-@USER@}"
cd "$root/source"

if [ "$(id -u)" = 0 ] && [ "$user" != none ]; then
  worker="$user"
else
  worker=""  # the worker runs as whoever runs run_autograder
fi

# Whether $1 is a Python 3.11 or later that the worker's user may run: run as root, it drops to
# that user and starts itself again, as the sandbox will.
usable() {
  "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || return 1
  [ -z "$worker" ] && return 0
  "$1" -I -c 'import os, sys
uid = int(sys.argv[1])
os.setgroups([]); os.setgid(uid); os.setuid(uid)
os.execv(sys.executable, [sys.executable, "-I", "-c", "import encodings, venv"])' "$worker" \
    </dev/null >/dev/null 2>&1
}

# The first usable Python: the one named, else python3.13 ... python3 wherever they are on PATH.
find_python() {
  local name path
  if [ -n "${GRADCHECK_SETUP_PYTHON:-}" ]; then
    usable "$GRADCHECK_SETUP_PYTHON" && echo "$GRADCHECK_SETUP_PYTHON"
    return
  fi
  for name in python3.13 python3.12 python3.11 python3; do
    for path in $(type -ap "$name"); do
      if usable "$path"; then
        echo "$path"
        return
      fi
    done
  done
}

python="$(find_python || true)"
if [ -z "$python" ] && [ -z "${GRADCHECK_SETUP_PYTHON:-}" ] && command -v apt-get >/dev/null; then
  # Gradescope's Ubuntu 22.04 images have Python 3.10 only
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y python3.11 python3.11-venv
  python="$(find_python || true)"
fi
if [ -z "$python" ]; then
  {
    echo "setup.sh: no Python 3.11 or later that the worker's user (uid ${worker:-of this shell}) may run."
    echo "  tried: ${GRADCHECK_SETUP_PYTHON:-python3.13 python3.12 python3.11 python3 on PATH}"
    echo "  A Python inside a folder only its owner may enter (a home folder of mode 0700, such"
    echo "  as /root/.pyenv) cannot run as that user. Install one where every user may run it"
    echo "  (apt-get install python3.11 python3.11-venv), name it with GRADCHECK_SETUP_PYTHON,"
    echo "  or set GRADCHECK_WORKER_USER=none to grade as root (students' code can then read"
    echo "  the answer key)."
  } >&2
  exit 1
fi
echo "setup.sh: the virtual environment is made from $python"

if ! "$python" -m venv "$root/venv"; then  # Debian and Ubuntu ship venv's pip separately
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y "python3.$("$python" -c \
    'import sys; print(sys.version_info[1])')-venv"
  "$python" -m venv "$root/venv"
fi
"$root/venv/bin/python" -m pip install --upgrade pip
# gradcheck's dependencies only: grading with the answer key needs neither torch nor jax.
"$root/venv/bin/python" -m pip install -r requirements.txt
"$root/venv/bin/python" -m gradcheck --version

# The worker's user must be able to start the worker with this environment's Python and import
# gradcheck from it; gradcheck's own preflight says what stops it, before any student submits.
if [ -n "$worker" ]; then
  chmod a+x "$root"
  probe="$(mktemp)"
  chmod 644 "$probe"
  if ! "$root/venv/bin/python" -I -c 'import sys
from gradcheck.engine.sandbox import preflight
problem = preflight(sys.argv[1], int(sys.argv[2]))
print(f"setup.sh: {problem}" if problem else "setup.sh: the worker starts as uid " + sys.argv[2],
      file=sys.stderr if problem else sys.stdout)
sys.exit(1 if problem else 0)' "$probe" "$worker"; then
    rm -f "$probe"
    exit 1
  fi
  rm -f "$probe"
fi
