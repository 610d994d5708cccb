#!/usr/bin/env bash
# reproducible.sh CHART.tgz EPOCH: make release's chart archive written again
# with EPOCH (SOURCE_DATE_EPOCH, the commit's time) as every file's time, so
# that one commit gives the same bytes (docs/RELEASE.md, "Reproducible").
#
# Helm v3's helm package writes the time it runs as each file's time in the
# archive (pkg/chartutil/save.go, time.Now()) and has no option for it. GNU tar
# writes the archive as helm wrote it otherwise: the same files in the same
# order, regular files of mode 0644 owned by 0:0, ustar; gzip -n records no
# name nor time. The archive's own time is set to EPOCH too: helm push takes
# it as the chart's org.opencontainers.image.created.
set -euo pipefail
chart=${1:?the chart archive helm package wrote} epoch=${2:?SOURCE_DATE_EPOCH}
[[ $epoch =~ ^[0-9]+$ ]] || { echo "reproducible.sh: EPOCH $epoch: want seconds since 1970" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -tzf "$chart" > "$work/files"
mkdir "$work/chart"
# -m: not helm's times, which tar warns may be a fraction of a second ahead of the clock.
tar -xzmf "$chart" -C "$work/chart"
tar -c --format=ustar --no-recursion --owner=0 --group=0 --numeric-owner --mode=0644 --mtime="@$epoch" \
	-C "$work/chart" --verbatim-files-from -T "$work/files" | gzip -9 -n > "$work/chart.tgz"
# The same files, in the same order, with the same bytes: only their times changed.
cmp <(tar -tzf "$work/chart.tgz") "$work/files"
cmp <(tar -xOzf "$work/chart.tgz") <(tar -xOzf "$chart")
mv "$work/chart.tgz" "$chart"
touch -d "@$epoch" "$chart"
