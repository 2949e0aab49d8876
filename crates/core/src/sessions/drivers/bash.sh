# sandlot's Bash driver: runs cells in one shell (crates/core/src/sessions/driver.rs has the wire).
#
# Started as `bash --noprofile --norc -c <this> bash`. Requests come from a private descriptor: fd 0 is moved to
# __sl_fd and /dev/null put on fd 0; Bash cannot make a descriptor close-on-exec, so __sl_fd is closed for the
# duration of each cell instead (children never get it). A cell is `source`d from fd 9 (a here-string) at the top
# level of the shell, so its working directory, variables (`declare` included: a sourced file has no scope of its
# own), functions, options and traps persist, and its exit code is the status of its last command.
#
# SIGINT (the manager sends it to the whole process group): while a cell runs, the INT trap returns from what runs
# (the sourced cell, or the innermost function) and turns on a DEBUG trap, with extdebug, that simulates `return`
# in every frame deeper than the driver until the cell's `source` has returned; the cell ends with 130, interrupted.
# Between cells SIGINT is ignored (its trap is ''). Limits: a cell's own INT and EXIT traps are replaced by the
# driver's before the next cell, its DEBUG trap is removed after an interrupted cell, and a cell that sets an INT
# trap is not interruptible; a foreground child that ignores SIGINT is waited for; a SIGINT that arrives as the
# shell forks a child reaches the shell alone, which then waits for the child (send SIGINT again); fd 9 holds the
# cell's source while it runs.
#
# `exit` in a cell (or a failure under `set -e`; an interrupted cell turns -e off until the cell ended) ends the
# shell: the EXIT trap still writes the cell's end markers, with the exit status; then the driver is gone and the
# session's state is lost.
# Every name of the driver's own starts with __sl_.

exec {__sl_fd}<&0 </dev/null
__sl_running=
__sl_interrupted=
__sl_nonce=
__sl_options=
__sl_errexit=
__sl_depth=${#BASH_SOURCE[@]}

__sl_return2() { return 2; }

__sl_end() {
    local status=$1 exiting=${2:-false} interrupted=false
    [[ -n $__sl_interrupted ]] && interrupted=true
    builtin printf '\0SANDLOT-END:%s\n' "$__sl_nonce" >&2
    builtin printf '\0SANDLOT-END:%s:{"exit_code": %d, "interrupted": %s, "exiting": %s}\n' \
        "$__sl_nonce" "$status" "$interrupted" "$exiting"
}

# An EXIT trap, so that a cell that ends the shell still ends with its markers.
__sl_on_exit() {
    local status=$?
    [[ -n $__sl_running ]] && __sl_end "$status" true
}

__sl_on_int='if [[ -n $__sl_running ]]; then
    __sl_interrupted=1
    __sl_errexit=${-//[^e]/}
    builtin set +e
    builtin shopt -s extdebug
    builtin trap "[[ -z \$__sl_interrupted ]] || (( \${#BASH_SOURCE[@]} <= __sl_depth )) || __sl_return2" DEBUG
    return 130
fi'

builtin trap '' INT
while :; do
    IFS=' ' builtin read -r -u "$__sl_fd" __sl_nonce __sl_length __sl_language || break
    __sl_code=
    if (( __sl_length > 0 )); then
        # -N counts characters; LC_ALL=C makes them bytes.
        LC_ALL=C IFS= builtin read -r -d '' -N "$__sl_length" -u "$__sl_fd" __sl_code || break
    fi
    builtin trap "$__sl_on_int" INT
    builtin trap __sl_on_exit EXIT
    __sl_interrupted=
    [[ -n $__sl_options ]] && builtin set "-$__sl_options"
    __sl_running=1
    builtin source /dev/fd/9 9<<<"$__sl_code" {__sl_fd}<&-
    # The cell's -e, -u and -x are off while the driver runs, and back before the next cell.
    { __sl_status=$?; __sl_options=${-//[^eux]/}$__sl_errexit; builtin set +eux; } 2>/dev/null
    __sl_errexit=
    __sl_running=
    builtin trap '' INT
    if [[ -n $__sl_interrupted ]]; then
        builtin trap - DEBUG
        builtin shopt -u extdebug
        __sl_status=130
    fi
    __sl_end "$__sl_status"
done
