#!/bin/bash
# timed.sh LOG CGROUP_PROCS CMD...: runs CMD (an archive_command or restore_command) and
# appends a record to LOG, two lines:
#   START_NS END_NS EXIT WAL_PATH <this shell's user> <sys>
#   <user> <sys>        CPU of CMD and everything it waited for (bash's `times`)
# When CGROUP_PROCS is a cgroup's cgroup.procs file (not "-"), the shell first moves itself
# there, so CMD and whatever it leaves running (ferry's agent, pgBackRest's async process
# and its workers) are counted in that cgroup's cpuacct.usage, even after they detach.
# The same wrapper wraps every archiver, so its own cost (one bash start, ~2 ms, outside the
# timed span) is the same for all. No forks of its own: $EPOCHREALTIME and builtins only
# (a subshell would report its own, empty, children times).
log=$1 cg=$2; shift 2
[ "$cg" = - ] || echo $$ >"$cg" 2>/dev/null || :
s=$EPOCHREALTIME
"$@"; rc=$?
e=$EPOCHREALTIME
{ printf '%s %s %s %s ' "${s/./}000" "${e/./}000" "$rc" "${*: -1}"; times; } >>"$log"
exit $rc
