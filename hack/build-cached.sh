# Sourced by the scripts in hack/ that build a Go binary from a tools module
# once and cache it (hack/e2e-operators.sh, hack/flyte-testdata.sh). The
# sourcing script defines log, which writes to standard error.

# build_cached MODULE_DIR PACKAGE BINARY [GO BUILD FLAGS...] prints BINARY,
# building PACKAGE with the Go module in MODULE_DIR into it when it is not
# there yet. Progress goes to standard error, every 30 s during the build so
# that a long first build never looks hung; the binary appears whole or not
# at all.
build_cached() {
	local module=$1 package=$2 binary=$3
	shift 3
	if [[ -x "$binary" ]]; then
		echo "$binary"
		return 0
	fi
	local dir name
	dir=$(dirname "$binary") name=$(basename "$binary")
	log "building $name ($package) from the Go module proxy into $dir"
	log "this happens once and takes several minutes on 2 cores"
	mkdir -p "$dir"
	local start=$SECONDS
	# On standard error: a sleep left over must not hold standard output open.
	(while sleep 30; do log "... still building $name ($((SECONDS - start))s)"; done) >&2 &
	local ticker=$!
	# A temporary name in the same directory, so that the rename is atomic.
	if ! (cd "$module" && go build "$@" -o "$dir/.$name.tmp" "$package") >&2; then
		kill "$ticker"
		log "building $name failed"
		return 1
	fi
	kill "$ticker"
	mv "$dir/.$name.tmp" "$binary"
	log "built $name in $((SECONDS - start))s"
	echo "$binary"
}
