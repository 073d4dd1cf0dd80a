#!/usr/bin/env bash
# conformance.sh: the upstream sig-api-machinery [Conformance] specs of the
# Kubernetes e2e suite (the k8s.io/kubernetes release in go.mod) against one
# plane of a fresh kplane server. `make conformance` runs it.
#
# It builds bin/kplane and bin/conformance/e2e.test when they are missing (the
# e2e binary once: delete it to rebuild), starts `kplane server` on a
# temporary data dir and a free loopback port, creates the plane, mints its
# kubeconfig with `kplane kubeconfig`, and runs every selected spec in its own
# e2e.test process with a timeout (test/conformance/runner). Results:
# $CONFORMANCE_OUT/results.md (table), results.json, specs/NNN.log.
#
# Environment:
#   KPLANE_BINARY              server under test (default bin/kplane, built if missing)
#   E2E_BINARY                 e2e.test (default bin/conformance/e2e.test, built if missing)
#   CONFORMANCE_FOCUS          specs to select (default: sig-api-machinery conformance)
#   CONFORMANCE_SKIP           further specs to skip, a regular expression
#   CONFORMANCE_SPEC_TIMEOUT   per-spec timeout (default 3m)
#   CONFORMANCE_SLOW           1: run the [Slow] specs too, each with a 15m timeout
#   CONFORMANCE_PARALLEL       specs run at once (default 4; [Serial] ones alone)
#   CONFORMANCE_OUT            results directory (default bin/conformance/results)
#   CONFORMANCE_E2E_ARGS       further e2e.test flags, space-separated
#   CONFORMANCE_ALLOW_FAILURES 1: exit 0 although specs failed (the table still says so)
# Exit: 0 all specs that ran passed; 1 a spec failed; 2 the run could not be
# made (build, server start, plane or listing failed).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
kplane=${KPLANE_BINARY:-$root/bin/kplane}
e2e=${E2E_BINARY:-$root/bin/conformance/e2e.test}
out=${CONFORMANCE_OUT:-$root/bin/conformance/results}
runner=$root/bin/conformance/runner
plane=conformance
GO=${GO:-go}

die() { echo "conformance: $*" >&2; exit 2; }

# build_e2e compiles the upstream suite from test/conformance (its own
# module): heavy, so niced and one package at a time.
build_e2e() {
	local k8s
	k8s=$(cd test/conformance && $GO list -m -f '{{.Version}}' k8s.io/kubernetes) ||
		die "reading the k8s.io/kubernetes version of test/conformance/go.mod failed"
	echo "building $e2e (k8s.io/kubernetes $k8s; takes a while, once)"
	mkdir -p "$(dirname "$e2e")"
	(cd test/conformance && CGO_ENABLED=0 nice -n 15 $GO test -c -p 1 -vet=off \
		-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$k8s" \
		-o "$e2e.tmp" k8s.io/kubernetes/test/e2e) || die "building e2e.test failed"
	mv "$e2e.tmp" "$e2e"
}

# free_port prints a loopback TCP port nothing listens on.
free_port() {
	local port
	for _ in $(seq 1 50); do
		port=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return
		fi
	done
	die "no free loopback port found"
}

if [[ ! -x $kplane ]]; then
	[[ -n ${KPLANE_BINARY:-} ]] && die "KPLANE_BINARY=$kplane is not an executable"
	make build || die "building bin/kplane failed"
fi
[[ -x $e2e ]] || build_e2e
(cd test/conformance && $GO build -o "$runner" ./runner) || die "building the runner failed"

work=$(mktemp -d "${TMPDIR:-/tmp}/kplane-conformance.XXXXXX")
port=$(free_port)
server_pid=
cleanup() {
	if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid"
		wait "$server_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$out"
echo "starting $kplane on 127.0.0.1:$port (log: $out/server.log)"
"$kplane" server --data-dir "$work/data" --bind-address 127.0.0.1 --https-port "$port" >"$out/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 120); do
	kill -0 "$server_pid" 2>/dev/null || die "the server exited at start (see $out/server.log)"
	"$kplane" healthcheck --data-dir "$work/data" --https-port "$port" --timeout 2s >/dev/null 2>&1 && break
	sleep 0.5
done
"$kplane" healthcheck --data-dir "$work/data" --https-port "$port" >/dev/null || die "the server is not ready after 60s (see $out/server.log)"

"$kplane" planes create --data-dir "$work/data" "$plane" >/dev/null || die "creating plane $plane failed"
"$kplane" kubeconfig --data-dir "$work/data" "$plane" >"$work/kubeconfig" || die "minting the kubeconfig of plane $plane failed"

args=(--e2e "$e2e" --kubeconfig "$work/kubeconfig" --out "$out"
	--spec-timeout "${CONFORMANCE_SPEC_TIMEOUT:-3m}" --parallel "${CONFORMANCE_PARALLEL:-4}")
[[ -n ${CONFORMANCE_FOCUS:-} ]] && args+=(--focus "$CONFORMANCE_FOCUS")
[[ -n ${CONFORMANCE_SKIP:-} ]] && args+=(--skip "$CONFORMANCE_SKIP")
[[ -n ${CONFORMANCE_E2E_ARGS:-} ]] && args+=(--e2e-args "$CONFORMANCE_E2E_ARGS")
[[ ${CONFORMANCE_SLOW:-0} == 1 ]] && args+=(--slow)
[[ ${CONFORMANCE_ALLOW_FAILURES:-0} == 1 ]] && args+=(--allow-failures)

status=0
"$runner" "${args[@]}" || status=$?
kill -0 "$server_pid" 2>/dev/null || { echo "conformance: the server died during the run (see $out/server.log)" >&2; status=2; }
exit "$status"
