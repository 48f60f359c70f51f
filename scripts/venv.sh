# Sourced by the scripts that need Python: creates the test venv on first
# use ($COMPACTD_VENV, default .venv) and installs tests/python's
# requirements and the Python package (clients/python) into it. Leaves its
# path in $venv.
venv="${COMPACTD_VENV:-.venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/python/requirements.txt
# The Python package under test (clients/python), rebuilt every time: its
# gRPC modules are generated from proto/ when it is built.
rm -rf clients/python/build  # setuptools reuses it: no stale module may ship
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps ./clients/python
