#!/usr/bin/env bash
# Builds the scientific Python environment for sandlot's Python runner: a virtual environment made from the host's
# /usr/bin/python3 with numpy, pandas and matplotlib (pinned below) from the package index, matplotlib's font cache
# built once into the environment, and a startup hook (a .pth line) that makes `plt.show()` save figures where the server
# returns them to the model as images (docs/mcp.md, "Images and files in a result"). Then it prints how to point the
# runner at it. Run again, it only checks (a second or so) unless the pins changed.
#
# The native jail binds a runner's install prefix read-only (docs/configuration.md, "How runners are found"): the
# venv's bin/python is a symlink to /usr/bin/python3, and the venv directory itself (pyvenv.cfg, site-packages, the
# font cache) is bound at the same path. So it must live outside /root, /home, the data root and the server's working
# directory, or the runner is refused.
#
# The Docker runner image runner-python carries the same environment (runners/Dockerfile-python, made by
# scripts/build-runners.sh): it runs this script with --check on the environment built here, or builds it in the image.
#
# Usage: scripts/python-env.sh [--check] [DIR]   (default DIR: $SANDLOT_PYTHON_ENV, else /opt/sandlot/python)
#        scripts/python-env.sh --pins            (prints the pins, `name==version` separated by spaces)
#   --check only checks DIR (the pins, the hook, the font cache) and fails when it does not check out.
set -euo pipefail

mode=make
case "${1:-}" in
    --check | --pins) mode="${1#--}"; shift ;;
esac
dir="${1:-${SANDLOT_PYTHON_ENV:-/opt/sandlot/python}}"
python="${PYTHON:-/usr/bin/python3}"
# The pins: one line each, so `pip install` and the check below agree. numpy 2.2 and matplotlib 3.10 support
# Python 3.10 to 3.13 (Debian 12 has 3.11).
pins=(numpy==2.2.6 pandas==2.2.3 matplotlib==3.10.3)

step() { printf '==> %s\n' "$*" >&2; }
die() { printf 'python-env.sh: %s\n' "$*" >&2; exit 1; }

if [[ "$mode" == pins ]]; then
    echo "${pins[*]}"
    exit 0
fi

[[ -x "$python" ]] || die "$python is missing (Debian: apt-get install python3 python3-venv)"
case "$dir" in
    /*) ;;
    *) die "give an absolute path (the runner is bound at the same path inside the sandbox): $dir" ;;
esac

# True when the env holds exactly the pinned versions and the hook and font cache are in place.
env_ok() {
    [[ -x "$dir/bin/python" ]] \
        && compgen -G "$dir/mplconfig/fontlist*.json" >/dev/null \
        && compgen -G "$dir/lib/python3*/site-packages/sandlot_startup.py" >/dev/null \
        && "$dir/bin/python" - "${pins[@]}" <<'EOF' 2>/dev/null
import sys, importlib.metadata as m
for pin in sys.argv[1:]:
    name, version = pin.split("==")
    if m.version(name) != version:
        sys.exit(1)
EOF
}

if env_ok; then
    step "$dir is ready (${pins[*]})"
elif [[ "$mode" == check ]]; then
    die "$dir is not the environment of the pins ${pins[*]} with its hook and font cache (for its interpreter, $(readlink -f "$dir/bin/python" 2>/dev/null || echo none))"
else
    step "making $dir from $python (${pins[*]})"
    rm -rf "$dir"
    mkdir -p "$(dirname "$dir")"
    "$python" -m venv "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir "${pins[@]}"
    site="$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    # The startup hook, imported by a .pth line at every start (Debian's own sitecustomize in /usr/lib/python3.*
    # comes first on sys.path and would shadow one here). It costs next to nothing until matplotlib is imported
    # (a meta-path hook, no matplotlib import of its own).
    printf 'import sandlot_startup\n' >"$site/sandlot.pth"
    cat >"$site/sandlot_startup.py" <<'EOF'
"""sandlot: matplotlib for a headless sandbox (installed by scripts/python-env.sh).

- MPLBACKEND=Agg: no display in the sandbox.
- MPLCONFIGDIR: matplotlib wants it writable, and the env is read-only in the sandbox. When matplotlib is first
  imported, /tmp/sandlot-mplconfig is made and the font cache built with the env (<env>/mplconfig) is copied in
  (a few tens of KiB), so no run rebuilds it (that costs seconds).
- plt.show() saves every open figure as /data/.sandlot/figures/figure-<n>.png and closes it; sandlot returns new
  images of a run to the model as image blocks. Set SANDLOT_FIGURES=0 to keep matplotlib's own show().
"""
import os
import sys

_ENV = sys.prefix
os.environ.setdefault("MPLBACKEND", "Agg")

_FIGURES = os.environ.get("SANDLOT_FIGURES_DIR", "/data/.sandlot/figures")


def _patch(pyplot):
    if getattr(pyplot.show, "_sandlot", False):
        return
    original = pyplot.show

    def show(*args, **kwargs):
        numbers = pyplot.get_fignums()
        if not numbers:
            return None
        try:
            os.makedirs(_FIGURES, exist_ok=True)
        except OSError:
            return original(*args, **kwargs)
        taken = {name for name in os.listdir(_FIGURES)}
        n = 1
        for number in numbers:
            while "figure-%d.png" % n in taken:
                n += 1
            taken.add("figure-%d.png" % n)
            pyplot.figure(number).savefig(os.path.join(_FIGURES, "figure-%d.png" % n))
            pyplot.close(number)
        return None

    show._sandlot = True
    pyplot.show = show


def _config_dir():
    if "MPLCONFIGDIR" in os.environ:
        return
    built = os.path.join(_ENV, "mplconfig")
    target = os.path.join(os.environ.get("TMPDIR") or "/tmp", "sandlot-mplconfig")
    try:
        os.makedirs(target, exist_ok=True)
        for name in os.listdir(built):
            if name.startswith("fontlist") and not os.path.exists(os.path.join(target, name)):
                with open(os.path.join(built, name), "rb") as src, open(os.path.join(target, name), "wb") as dst:
                    dst.write(src.read())
    except OSError:
        return
    os.environ["MPLCONFIGDIR"] = target


class _Finder:
    """Prepares matplotlib's config dir before its first import, and patches matplotlib.pyplot right after."""

    def find_spec(self, name, path=None, target=None):
        if name == "matplotlib":
            _config_dir()
            return None
        if name != "matplotlib.pyplot":
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util

            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_and_patch
        return spec


if os.environ.get("SANDLOT_FIGURES", "1") != "0":
    sys.meta_path.insert(0, _Finder())
EOF
    step "building matplotlib's font cache in $dir/mplconfig"
    mkdir -p "$dir/mplconfig"
    MPLCONFIGDIR="$dir/mplconfig" "$dir/bin/python" -c 'import matplotlib.font_manager as f; f._load_fontmanager(try_read_cache=False)' >/dev/null
    # Bytecode for everything, so a read-only env never tries (and fails) to write __pycache__ at run time.
    "$dir/bin/python" -m compileall -q "$dir/lib" >/dev/null || true
    chmod -R a+rX "$dir"
    env_ok || die "the env at $dir does not check out after installing (see the output above)"
fi

"$dir/bin/python" - <<'EOF' >&2
import importlib.metadata as m
print("    " + ", ".join(f"{n} {m.version(n)}" for n in ("numpy", "pandas", "matplotlib")))
EOF
if [[ "$mode" == make ]]; then
    printf 'Point the runner at it:\n  SANDLOT_PYTHON=%s/bin/python sandlot serve\n' "$dir"
fi
