# The checks the shell tests share (sourced by cli_test.sh, mpi_test.sh, serve_test.sh):
# counters, a case name for messages, and the run / said helpers over $work.
# The sourcing script sets $work (a temporary folder) first, and ends with `summary`.
passed=0
failed=0
case=setup

ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL [$case] $*"; }
check() { if eval "$1"; then ok; else bad "$2"; fi; }

# run <expected status> <command...>: runs it (10 minutes at most) with stdout and stderr
# in $work/out and $work/err; checks the status, and that it was not a signal.
run() {
    local want=$1
    shift
    timeout 600 "$@" >"$work/out" 2>"$work/err"
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        bad "exit status $rc, expected $want: $*"
        sed 's/^/    /' "$work/err" | tail -5
    else
        ok
    fi
    if [ "$rc" -ge 124 ]; then bad "ended by a signal or the timeout ($rc): $*"; fi
}
# said <text>: the last run's stdout or stderr contains text (a fixed string)
said() { if grep -qF -- "$1" "$work/out" "$work/err"; then ok; else bad "no \"$1\" in: $(head -c 300 "$work/err")"; fi; }
not_said() { if grep -qF -- "$1" "$work/out" "$work/err"; then bad "\"$1\" was said: $(head -c 300 "$work/err")"; else ok; fi; }
absent() { if [ -e "$1" ]; then bad "$1 exists"; else ok; fi; }

# The last line, as the C tests print it; the status of the script.
summary() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
