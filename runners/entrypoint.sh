#!/bin/sh
# The runner contract of sandlot's Docker images (the original spec's, section 6.2): the code arrives on standard
# input, is written to a file under /tmp, and runs with /data as its working directory (SANDLOT_WORKDIR when set: the
# Workspace layout's conversation path); the container exits with the program's exit code. Extension: when SANDLOT_CODE_BYTES is set, only that many bytes of standard input are the code
# and the rest is the program's own standard input (`head -c` never reads past them).
#
# Usage (the image's ENTRYPOINT): sandlot-runner INTERPRETER [ARGS...]; SANDLOT_EXT is the code file's extension.
set -eu
file="/tmp/main.${SANDLOT_EXT:-txt}"
if [ -n "${SANDLOT_CODE_BYTES:-}" ]; then
    head -c "$SANDLOT_CODE_BYTES" > "$file"
else
    cat > "$file"
    exec < /dev/null
fi
cd "${SANDLOT_WORKDIR:-/data}"
exec "$@" "$file"
