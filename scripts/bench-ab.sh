#!/usr/bin/env bash
# bench-ab.sh measures two revisions side by side: it builds custody, the
# fake transport and the in-process reference of each (git worktrees under
# a temporary directory), then runs `custody bench e2e` of each in turn,
# ROUNDS rounds (default 5), and prints every goal value of each run and,
# per goal, the median of each revision and their ratio (B/A). This
# machine's speed drifts between runs: only figures of one such run are
# compared.
#
#   scripts/bench-ab.sh REV_A REV_B [ROUNDS] [-- bench e2e flags...]
#
# REV may be a commit, a branch, or "." for the working tree as it is.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
a=$1 b=$2
shift 2
rounds=5
if [ $# -gt 0 ] && [ "$1" != -- ]; then rounds=$1; shift; fi
[ "${1:-}" = -- ] && shift
case $rounds in '' | *[!0-9]*) echo "bench-ab: ROUNDS $rounds: want a number" >&2; exit 2 ;; esac
root=$(git rev-parse --show-toplevel)
go=${GO:-go}
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/src-A" 2>/dev/null || true; git -C "$root" worktree remove --force "$work/src-B" 2>/dev/null || true; rm -rf "$work"' EXIT

build() { # build NAME REV
	local src=$root
	if [ "$2" != . ]; then
		src=$work/src-$1
		git -C "$root" worktree add -q --detach "$src" "$2"
	fi
	mkdir -p "$work/$1"
	(cd "$src" && for p in cmd/host:custody cmd/benchref:custody-bench-ref plugins/fake/cmd/custody-transport-fake:custody-transport-fake; do
		"$go" build -o "$work/$1/${p#*:}" "./${p%%:*}"
	done)
	echo "$1: $2 ($(git -C "$src" rev-parse --short HEAD)$([ "$2" = . ] && ! git -C "$src" diff --quiet && echo ", with uncommitted changes"))"
}
build A "$a"
build B "$b"

for r in $(seq "$rounds"); do
	for v in A B; do
		"$work/$v/custody" bench e2e --in-process "$work/$v/custody-bench-ref" "$@" >"$work/out" 2>&1 || { cat "$work/out" >&2; exit 1; }
		grep '^goal ' "$work/out" | sed "s/^/$v $r /" | tee -a "$work/goals"
	done
done
echo "median of $rounds rounds (B/A):"
awk '{ split($4, nm, "="); split($5, v, "="); split($6, t, "="); x = v[2]; y = t[2]; sub(/us$/, "", x); sub(/us$/, "", y)
	vals[$1 " " nm[2]] = vals[$1 " " nm[2]] " " x; tgts[$1 " " nm[2]] = tgts[$1 " " nm[2]] " " y; names[nm[2]] = 1 }
function median(s,   a, k, i, j, t) { k = split(s, a, " "); for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }; return a[int((k + 1) / 2)] }
END { for (g in names) { ma = median(vals["A " g]); mb = median(vals["B " g])
	printf "  %-18s A %9.1f (target %9.1f)  B %9.1f (target %9.1f)  B/A %.3f\n", g, ma, median(tgts["A " g]), mb, median(tgts["B " g]), (ma > 0 ? mb / ma : 0) } }' "$work/goals"
