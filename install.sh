#!/bin/sh
# Installs kplane: curl -sfL <url>/install.sh | sh -s - [--systemd]
# Run it with --help for its options and variables.
set -eu

DEFAULT_DOWNLOAD_URL=https://github.com/kplane/kplane/releases

INSTALL_DIR=${INSTALL_DIR:-/usr/local/bin}
KPLANE_VERSION=${KPLANE_VERSION:-}
KPLANE_DOWNLOAD_URL=${KPLANE_DOWNLOAD_URL:-$DEFAULT_DOWNLOAD_URL}
KPLANE_BINARY=${KPLANE_BINARY:-}
KPLANE_SHA256=${KPLANE_SHA256:-}
KPLANE_INSECURE_SKIP_CHECKSUM=${KPLANE_INSECURE_SKIP_CHECKSUM:-}
KPLANE_CONFIG_DIR=${KPLANE_CONFIG_DIR:-/etc/kplane}
KPLANE_DATA_DIR=${KPLANE_DATA_DIR:-/var/lib/kplane}
SYSTEMD_DIR=${SYSTEMD_DIR:-/etc/systemd/system}
KPLANE_SKIP_ENABLE=${KPLANE_SKIP_ENABLE:-false}

BIN=$INSTALL_DIR/kplane
UNIT=$SYSTEMD_DIR/kplane.service
ENV_FILE=$KPLANE_CONFIG_DIR/kplane.env

info() { echo "[kplane] $*"; }
warn() { echo "[kplane] WARNING: $*" >&2; }
fatal() {
	echo "[kplane] error: $*" >&2
	exit 1
}

# usage is a here-document, not this file's comments: piped into sh, the
# script has no file to read them from.
usage() {
	cat <<'EOF'
Installs kplane: curl -sfL <url>/install.sh | sh -s - [--systemd]

  --systemd     also install and start the kplane.service unit
  --uninstall   remove what this script installed (add --purge to also
                delete the data directory)
  -h, --help    this text

A downloaded binary is verified against the release's sha256sums.txt (or
KPLANE_SHA256); when neither is available the install fails rather than
install a binary nobody checked.

Environment:
  INSTALL_DIR          where the binary goes (default /usr/local/bin)
  KPLANE_VERSION       release to download (default: the latest)
  KPLANE_DOWNLOAD_URL  base URL of the releases (default
                       https://github.com/kplane/kplane/releases); assets are
                       <base>/download/<version>/kplane-<os>-<arch>, or
                       <base>/latest/download/... without KPLANE_VERSION
  KPLANE_BINARY        install this local binary instead of downloading
  KPLANE_SHA256        expected sha256 of the binary (always checked when
                       set; it also verifies a download whose release has no
                       sha256sums.txt)
  KPLANE_INSECURE_SKIP_CHECKSUM
                       1: install a download even when its checksum cannot be
                       fetched (no sha256sums.txt, no KPLANE_SHA256), with a
                       warning. Insecure: the binary is not verified. A
                       checksum that is fetched and does not match still fails.
  KPLANE_CONFIG_DIR    env file directory (default /etc/kplane)
  KPLANE_DATA_DIR      data directory (default /var/lib/kplane)
  SYSTEMD_DIR          unit directory (default /etc/systemd/system)
  KPLANE_SKIP_ENABLE   true: install the unit without enabling/starting it
EOF
}

# ensure_dir creates dir or explains why it cannot.
ensure_dir() {
	if ! mkdir -p "$1" 2>/dev/null || [ ! -w "$1" ]; then
		fatal "cannot write $1: run as root (curl ... | sudo sh -) or choose another directory (see the variables at the top of this script)"
	fi
}

systemd_running() {
	[ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1
}

# detect_platform sets OS and ARCH to the release names of this machine.
detect_platform() {
	os=$(uname -s)
	case $os in
	Linux) OS=linux ;;
	Darwin) OS=darwin ;;
	*) fatal "unsupported operating system $os: kplane is released for Linux and macOS" ;;
	esac
	arch=$(uname -m)
	case $arch in
	x86_64 | amd64) ARCH=amd64 ;;
	aarch64 | arm64) ARCH=arm64 ;;
	*) fatal "unsupported architecture $arch: kplane is released for amd64 and arm64" ;;
	esac
}

sha256_of() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum "$1" | cut -d' ' -f1
	elif command -v shasum >/dev/null 2>&1; then
		shasum -a 256 "$1" | cut -d' ' -f1
	else
		fatal "neither sha256sum nor shasum is installed: cannot verify the binary"
	fi
}

# download URL FILE; fails (status 1) without a message, callers explain.
download() {
	if command -v curl >/dev/null 2>&1; then
		curl -fsSL -o "$2" "$1"
	elif command -v wget >/dev/null 2>&1; then
		wget -q -O "$2" "$1"
	else
		fatal "neither curl nor wget is installed"
	fi
}

release_url() {
	if [ -n "$KPLANE_VERSION" ]; then
		echo "$KPLANE_DOWNLOAD_URL/download/$KPLANE_VERSION/$1"
	else
		echo "$KPLANE_DOWNLOAD_URL/latest/download/$1"
	fi
}

# fetch_binary leaves the binary to install in $TMP/kplane.
fetch_binary() {
	if [ -n "$KPLANE_BINARY" ]; then
		[ -f "$KPLANE_BINARY" ] || fatal "KPLANE_BINARY=$KPLANE_BINARY is not a file"
		cp "$KPLANE_BINARY" "$TMP/kplane"
		info "using local binary $KPLANE_BINARY"
	else
		asset=kplane-$OS-$ARCH
		url=$(release_url "$asset")
		info "downloading $url"
		download "$url" "$TMP/kplane" || fatal "downloading $url failed"
		sums_url=$(release_url sha256sums.txt)
		if download "$sums_url" "$TMP/sha256sums.txt" 2>/dev/null; then
			want=$(awk -v a="$asset" '$2 == a || $2 == "*" a { print $1 }' "$TMP/sha256sums.txt")
			[ -n "$want" ] || fatal "sha256sums.txt of the release has no entry for $asset"
			[ -n "$KPLANE_SHA256" ] || KPLANE_SHA256=$want
			[ "$want" = "$KPLANE_SHA256" ] || fatal "KPLANE_SHA256 does not match the release's sha256sums.txt"
		elif [ -n "$KPLANE_SHA256" ]; then
			info "no sha256sums.txt at $sums_url; verifying against KPLANE_SHA256"
		elif [ "$KPLANE_INSECURE_SKIP_CHECKSUM" = 1 ]; then
			warn "downloading $sums_url failed; installing an UNVERIFIED binary because KPLANE_INSECURE_SKIP_CHECKSUM=1"
		else
			fatal "downloading $sums_url failed: cannot verify the binary, so nothing was installed. Set KPLANE_SHA256 to its expected sha256, or KPLANE_INSECURE_SKIP_CHECKSUM=1 to install it unverified"
		fi
	fi
	if [ -n "$KPLANE_SHA256" ]; then
		got=$(sha256_of "$TMP/kplane")
		[ "$got" = "$KPLANE_SHA256" ] || fatal "sha256 mismatch: got $got, want $KPLANE_SHA256"
		info "sha256 verified"
	fi
	chmod 0755 "$TMP/kplane"
	"$TMP/kplane" --version >/dev/null 2>&1 || fatal "the binary does not run on this machine ($OS/$ARCH)"
}

# unit_source leaves the systemd unit in $TMP/kplane.service: next to this
# script in a checkout, else from the release.
unit_source() {
	here=$(dirname "$0")
	if [ -f "$here/scripts/kplane.service" ]; then
		cp "$here/scripts/kplane.service" "$TMP/kplane.service"
	else
		url=$(release_url kplane.service)
		download "$url" "$TMP/kplane.service" || fatal "downloading $url failed"
	fi
}

install_systemd() {
	[ "$OS" = linux ] || fatal "--systemd needs Linux"
	unit_source
	ensure_dir "$SYSTEMD_DIR"
	ensure_dir "$KPLANE_CONFIG_DIR"
	ensure_dir "$KPLANE_DATA_DIR"
	chmod 0700 "$KPLANE_DATA_DIR"
	# The unit names the default paths; point it at the ones used here.
	sed -e "s#/usr/local/bin/kplane#$BIN#g" \
		-e "s#/etc/kplane/kplane.env#$ENV_FILE#g" \
		-e "s#/var/lib/kplane#$KPLANE_DATA_DIR#g" \
		"$TMP/kplane.service" >"$UNIT"
	chmod 0644 "$UNIT"
	info "installed $UNIT"
	if [ ! -f "$ENV_FILE" ]; then
		cat >"$ENV_FILE" <<EOF
# Settings of kplane.service: KPLANE_* variables, one per line, named after
# the flags of 'kplane server --help' (--https-port -> KPLANE_HTTPS_PORT).
# Restart the service after a change: systemctl restart kplane
KPLANE_DATA_DIR=$KPLANE_DATA_DIR
#KPLANE_BIND_ADDRESS=0.0.0.0
#KPLANE_TLS_SAN=kplane.example.com
#KPLANE_LOG_FORMAT=json
EOF
		chmod 0600 "$ENV_FILE"
		info "wrote $ENV_FILE"
	fi
	if [ "$KPLANE_SKIP_ENABLE" != true ] && systemd_running; then
		systemctl daemon-reload
		systemctl enable --now kplane.service
		info "kplane.service enabled and started; admin kubeconfig: $KPLANE_DATA_DIR/admin.kubeconfig"
	else
		info "not starting the service (no running systemd or KPLANE_SKIP_ENABLE=true); to start it: systemctl daemon-reload && systemctl enable --now kplane"
	fi
}

uninstall() {
	if [ -f "$UNIT" ]; then
		if [ "$KPLANE_SKIP_ENABLE" != true ] && systemd_running; then
			systemctl disable --now kplane.service || true
		fi
		rm -f "$UNIT"
		if [ "$KPLANE_SKIP_ENABLE" != true ] && systemd_running; then
			systemctl daemon-reload || true
		fi
		info "removed $UNIT"
	fi
	if [ -f "$ENV_FILE" ]; then
		rm -f "$ENV_FILE"
		info "removed $ENV_FILE"
	fi
	rmdir "$KPLANE_CONFIG_DIR" 2>/dev/null || true
	if [ -f "$BIN" ]; then
		rm -f "$BIN"
		info "removed $BIN"
	fi
	if [ "$PURGE" = true ]; then
		rm -rf "$KPLANE_DATA_DIR"
		info "removed $KPLANE_DATA_DIR"
	elif [ -d "$KPLANE_DATA_DIR" ]; then
		info "kept the data in $KPLANE_DATA_DIR (--uninstall --purge deletes it)"
	fi
}

SYSTEMD=false
UNINSTALL=false
PURGE=false
for arg in "$@"; do
	case $arg in
	--systemd) SYSTEMD=true ;;
	--uninstall) UNINSTALL=true ;;
	--purge) PURGE=true ;;
	-h | --help)
		usage
		exit 0
		;;
	*) fatal "unknown argument $arg (want --systemd, --uninstall, --purge)" ;;
	esac
done
[ "$PURGE" = false ] || [ "$UNINSTALL" = true ] || fatal "--purge goes with --uninstall"

if [ "$UNINSTALL" = true ]; then
	uninstall
	exit 0
fi

detect_platform
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fetch_binary
ensure_dir "$INSTALL_DIR"
# Write next to the target and rename: a running kplane keeps its old
# binary, and an interrupted install never leaves half a file.
cp "$TMP/kplane" "$BIN.new"
mv -f "$BIN.new" "$BIN"
info "installed $BIN ($("$BIN" --version))"
if [ "$SYSTEMD" = true ]; then
	install_systemd
else
	info "start it with: kplane server   (admin kubeconfig: <data-dir>/admin.kubeconfig)"
fi
