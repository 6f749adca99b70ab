# Helpers the side-by-side benchmark scripts share (sourced, not run).

# ticks: CPU time (user + system, in clock ticks) of the processes whose pids are given.
ticks() { local t=0 p; for p in "$@"; do t=$(( t + $(awk '{print $14 + $15}' "/proc/${p}/stat") )); done; echo "${t}"; }
hz=$(getconf CLK_TCK)
# to_ms: a wrk or h2load duration (850us, 3.2ms, 1.1s) in milliseconds.
to_ms() { awk -v v="$1" 'BEGIN { if (v ~ /us$/) { sub(/us/,"",v); print v/1000 } else if (v ~ /ms$/) { sub(/ms/,"",v); print v } else { sub(/s/,"",v); print v*1000 } }'; }
# median of the numbers on stdin, one per line.
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
