#!/usr/bin/env bash
# Runs the semantic mutants of mutants/*.patch, one at a time: each patch is
# applied to a copy of the committed tree (HEAD) in a temp dir, which must
# build; then the randomized tests (TestSchedule and TestFencedLinearizable
# of the root package, TestRedissonReentryVersusUnlock of package redisson),
# each in its own package, run at their `make test` size with each seed of
# SEEDS, and if the mutant survives them, the targeted tests its header
# names ("# targeted: A|B"), in the package its header names ("# package:
# ./redisson"; the root package when it names none).
# It prints a table: mutant, the test that killed it (or "survived"), time.
#
#   mutants/run.sh                   every mutant
#   MUTANT=name mutants/run.sh       one (name of its patch, without .patch;
#                                    several, space-separated; "none" runs the
#                                    unmutated tree, a check of the net itself)
#   SEEDS="1 2 3" mutants/run.sh     the seeds of the randomized tests
#   LOGS=dir mutants/run.sh          where the test output goes (default: a
#                                    new temp dir, named at the end)
#   RANDOMIZED=0 mutants/run.sh      the targeted tests only (to check a new
#                                    mutant's header)
#
# A randomized test that fails names what it found (TestSchedule's kinds of
# violations) in the table's last column: a mutant that the randomized tests
# cannot reach may still meet a failure that has nothing to do with it, so
# read the log ("LOGS") of a kill that looks unrelated.
#
# It exits 1 when a mutant survived or did not build, so a survivor is seen.
set -u

root=$(git rev-parse --show-toplevel) || exit 2
cd "$root" || exit 2
seeds=${SEEDS:-"3 17 101"}
logs=${LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/redisync-mutants-logs.XXXXXX")}
mkdir -p "$logs"
timeout=${TEST_TIMEOUT:-600s}
# The randomized tests, as TEST:PACKAGE.
randomized="TestSchedule:. TestFencedLinearizable:. TestRedissonReentryVersusUnlock:./redisson"
[ "${RANDOMIZED:-1}" = 0 ] && randomized=""

if [ -n "${MUTANT:-}" ]; then
	names=$MUTANT
else
	names=$(for p in mutants/*.patch; do basename "$p" .patch; done)
fi

# header FIELD PATCH prints the value of the "# FIELD: ..." line of a patch.
header() { sed -n "s/^# $1: //p" "$2" | head -n 1; }

# gotest DIR PKG LOG PATTERN ARGS... runs go test of package PKG in the
# copy; its exit code.
gotest() {
	local dir=$1 pkg=$2 log=$3 pattern=$4
	shift 4
	(cd "$dir" && env -u REDISYNC_SOAK GOWORK=off go test -race -count=1 -timeout "$timeout" -run "$pattern" "$pkg" "$@") >"$log" 2>&1
}

# found LOG prints what a failed randomized test reports: TestSchedule's
# kinds of violations, TestFencedLinearizable's first finding, or else the
# first line the test logged.
found() {
	local v
	v=$(sed -n 's/^ *violations: //p' "$1" | head -n 1)
	[ -z "$v" ] && v=$(grep -E '_test\.go:[0-9]+: seed [0-9]+: ' "$1" | head -n 1 | sed 's/^ *//' | cut -c1-100)
	[ -z "$v" ] && v=$(grep -E '_test\.go:[0-9]+: ' "$1" | grep -v 'seed [0-9]*; replay' | head -n 1 | sed 's/^ *//' | cut -c1-100)
	echo "$v"
}

# failed LOG prints the top-level tests a go test log reports failed.
failed() { sed -n 's/^--- FAIL: \(Test[^ ]*\).*/\1/p' "$1" | sort -u | paste -sd, -; }

rows=()
status=0
for name in $names; do
	patch=mutants/$name.patch
	if [ "$name" != none ] && [ ! -f "$patch" ]; then
		echo "no such mutant: $name" >&2
		status=2
		continue
	fi
	start=$(date +%s)
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/redisync-mutant.XXXXXX")
	git archive HEAD | tar -x -C "$tmp"
	# The untracked packages of the Redisson interop driver and the Quint
	# checker, as `make deps` installed them.
	for nm in redisson/testdata/redisson-node/node_modules spec/node_modules; do
		[ -d "$nm" ] && ln -s "$root/$nm" "$tmp/$nm"
	done
	killer="" what=""
	if [ "$name" != none ]; then
		if ! (cd "$tmp" && git apply -p1 "$root/$patch") >"$logs/$name.apply.log" 2>&1; then
			killer="does not apply"
		elif ! (cd "$tmp" && GOWORK=off go vet . ./redisson/) >"$logs/$name.vet.log" 2>&1; then
			killer="does not build"
		fi
	fi
	if [ -z "$killer" ]; then
		for seed in $seeds; do
			for tp in $randomized; do
				t=${tp%%:*} pkg=${tp#*:}
				echo "$name: $t ($pkg) -seed $seed" >&2
				if ! gotest "$tmp" "$pkg" "$logs/$name.$t.$seed.log" "^$t\$" -seed "$seed"; then
					killer="$t (seed $seed)"
					what=$(found "$logs/$name.$t.$seed.log")
					break 2
				fi
			done
		done
	fi
	if [ -z "$killer" ]; then
		targeted="" pkg=""
		[ "$name" != none ] && targeted=$(header targeted "$patch") && pkg=$(header package "$patch")
		pkg=${pkg:-.}
		if [ -n "$targeted" ]; then
			echo "$name: targeted ^($targeted)\$ ($pkg)" >&2
			if ! gotest "$tmp" "$pkg" "$logs/$name.targeted.log" "^($targeted)\$"; then
				killer=$(failed "$logs/$name.targeted.log")
				killer=${killer:-"targeted tests (see $name.targeted.log)"}
			fi
		fi
	fi
	if [ -z "$killer" ]; then
		killer=survived
		[ "$name" != none ] && status=1
	fi
	case $killer in "does not"*) status=1 ;; esac
	rm -rf "$tmp"
	row=$(printf '%-34s %-46s %5ss  %s' "$name" "$killer" "$(($(date +%s) - start))" "$what")
	echo "$row" >&2
	rows+=("$row")
done

echo
printf '%-34s %-46s %6s  %s\n' mutant "killed by" time "what it found"
for r in "${rows[@]}"; do echo "$r"; done
echo
echo "test output: $logs"
exit $status
