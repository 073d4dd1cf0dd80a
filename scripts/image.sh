#!/bin/sh
# Builds the kplane container image (Containerfile) with podman or docker,
# whichever is present; `make image` and `make release` run it.
#
#   scripts/image.sh build TAG ARCH BINARY       image TAG for linux/ARCH from BINARY
#   scripts/image.sh save TAG ARCH BINARY FILE   the same, then written to FILE (an archive)
#
# CONTAINER_RUNTIME chooses podman or docker (default: podman if installed,
# else docker).
set -eu

fatal() {
	echo "image.sh: $*" >&2
	exit 1
}

runtime() {
	if [ -n "${CONTAINER_RUNTIME:-}" ]; then
		command -v "$CONTAINER_RUNTIME" >/dev/null 2>&1 || fatal "CONTAINER_RUNTIME=$CONTAINER_RUNTIME is not installed"
		echo "$CONTAINER_RUNTIME"
	elif command -v podman >/dev/null 2>&1; then
		echo podman
	elif command -v docker >/dev/null 2>&1; then
		echo docker
	else
		fatal "neither podman nor docker is installed (apt-get install podman runc; see README, Container image)"
	fi
}

# build TAG ARCH BINARY
build() {
	tag=$1 arch=$2 binary=$3
	[ -f "$binary" ] || fatal "$binary does not exist (make build, or make release for dist/)"
	rt=$(runtime)
	here=$(cd "$(dirname "$0")/.." && pwd)
	# The context holds only what the image copies: docker sends all of it to
	# its daemon, and nothing else of the checkout belongs in the image.
	context=$(mktemp -d)
	trap 'rm -rf "$context"' EXIT
	cp "$binary" "$context/kplane-linux-$arch"
	mkdir -m 0700 "$context/data"
	set -- --platform "linux/$arch" --build-arg "TARGETARCH=$arch" -f "$here/Containerfile" -t "$tag"
	case $(basename "$rt") in
	# Podman's default OCI format has no HEALTHCHECK and drops it with
	# only a warning. Its intermediate images would be a build cache shared
	# by every build on the machine, and removing one image (rmi) removes
	# the intermediate images under it while another build is using them
	# ("image not known"); the image is a binary on scratch, so caching its
	# steps saves nothing.
	podman) set -- "$@" --format docker --layers=false ;;
	esac
	"$rt" build "$@" "$context"
}

# save TAG ARCH BINARY FILE
save() {
	build "$1" "$2" "$3"
	rm -f "$4"
	case $(basename "$(runtime)") in
	podman) podman save --format docker-archive -o "$4" "$1" ;;
	*) docker save -o "$4" "$1" ;;
	esac
}

[ $# -ge 1 ] || fatal "usage: image.sh build TAG ARCH BINARY | save TAG ARCH BINARY FILE"
cmd=$1
shift
case $cmd in
build) [ $# -eq 3 ] || fatal "usage: image.sh build TAG ARCH BINARY" ;;
save) [ $# -eq 4 ] || fatal "usage: image.sh save TAG ARCH BINARY FILE" ;;
*) fatal "unknown command $cmd (want build or save)" ;;
esac
"$cmd" "$@"
