#!/usr/bin/env bash
# Print the path of an interpreter of one Python version on this machine, or exit 1 where there is none:
#   envs/find_python.sh 3.13        (3.13t: a free-threaded build)
# Looked for in order: $CRANE_PYTHON<version without dots> (e.g. CRANE_PYTHON313), pyenv's versions
# ($PYENV_ROOT, default ~/.pyenv), then python<version> on PATH. A candidate counts only if it runs and is that
# version (a pyenv shim of a version that is not selected exists but fails). tests/kernel_envs.py uses it too.
set -uo pipefail
version="$1"
want="${version%t}"
check='import sys, sysconfig; print("%d.%d%s" % (*sys.version_info[:2], "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""))'
override_var="CRANE_PYTHON${version//./}"
candidates=()
[ -z "${!override_var:-}" ] || candidates+=("${!override_var}")
pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
for exe in $(ls -d "$pyenv_root"/versions/"$want".*/bin/python"$version" 2>/dev/null | sort -rV); do
    candidates+=("$exe")
done
on_path="$(command -v "python$version" 2>/dev/null)" && candidates+=("$on_path")
for exe in "${candidates[@]}"; do
    if [ "$("$exe" -I -c "$check" 2>/dev/null)" = "$version" ]; then
        echo "$exe"
        exit 0
    fi
done
exit 1
