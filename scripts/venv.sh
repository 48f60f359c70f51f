# Sourced by the scripts that need Python: creates the test venv on first
# use ($COMPACTD_VENV, default .venv) and installs tests/python's
# requirements into it. Leaves its path in $venv.
venv="${COMPACTD_VENV:-.venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/python/requirements.txt
