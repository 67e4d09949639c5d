#!/usr/bin/env bash
# Re-vendors the web console's front-end libraries from the npm registry into
# services/api/ui/vendor/ (their dist files and licenses, committed; docs/DECISIONS.md says
# why). Run by hand when a version changes here; installs and tests never run it.
#   bash ops/vendor_ui.sh
set -euo pipefail
cd "$(dirname "$0")/.."
XTERM=@xterm/xterm@6.0.0
XTERM_FIT=@xterm/addon-fit@0.11.0
NOVNC=@novnc/novnc@1.7.0
UPLOT=uplot@1.6.32
JSYAML=js-yaml@4.1.0

dest=services/api/ui/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unpack() {  # unpack PACKAGE DIR: the registry's tarball of PACKAGE into DIR
  mkdir -p "$2"
  tar xzf "$work/$(cd "$work" && npm pack --silent "$1" | tail -1)" -C "$2" --strip-components=1
}
unpack "$XTERM" "$work/xterm"
unpack "$XTERM_FIT" "$work/xterm-fit"
unpack "$NOVNC" "$work/novnc"
unpack "$UPLOT" "$work/uplot"
unpack "$JSYAML" "$work/js-yaml"

rm -rf "$dest"
mkdir -p "$dest/xterm" "$dest/xterm-addon-fit" "$dest/novnc/docs" "$dest/uplot" "$dest/js-yaml"
cp "$work/xterm/lib/xterm.mjs" "$work/xterm/css/xterm.css" "$work/xterm/LICENSE" "$dest/xterm/"
cp "$work/xterm-fit/lib/addon-fit.mjs" "$work/xterm-fit/LICENSE" "$dest/xterm-addon-fit/"
cp -r "$work/novnc/core" "$work/novnc/vendor" "$dest/novnc/"
cp "$work/novnc/LICENSE.txt" "$work/novnc/AUTHORS" "$dest/novnc/"
cp "$work/novnc/docs/"LICENSE* "$dest/novnc/docs/"
cp "$work/uplot/dist/uPlot.esm.js" "$work/uplot/dist/uPlot.min.css" "$work/uplot/LICENSE" "$dest/uplot/"
cp "$work/js-yaml/dist/js-yaml.mjs" "$work/js-yaml/LICENSE" "$dest/js-yaml/"
find "$dest" -name '*.md' ! -name 'LICENSE*' -delete
cat > "$dest/VERSIONS" <<END
$XTERM
$XTERM_FIT
$NOVNC
$UPLOT
$JSYAML
END
echo "vendored into $dest:"; cat "$dest/VERSIONS"
