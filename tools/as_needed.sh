#!/usr/bin/env bash
# Copies a shared library without the libraries it names (NEEDED) but takes no symbol from: what
# the linker's --as-needed would have left out. Note [Debian's LibTorch as --as-needed links it]
# in CMakeLists.txt says why the build does this to Debian's libtorch_cpu.so.1.13.
# Usage: tools/as_needed.sh LIBRARY FOLDER
#   writes FOLDER/<LIBRARY's soname>, and prints the names it left out on one line (nothing when
#   it left none out). Exit 2: a tool missing (readelf, nm, patchelf, ldd), LIBRARY not a shared
#   library, or a library's symbols unreadable.
# A name is left out only when none of the symbols LIBRARY leaves undefined is defined by the
# library the loader finds for it (ldd): nothing LIBRARY calls or reads can then come from it.
set -euo pipefail
die() { echo "as_needed.sh: $*" >&2; exit 2; }
[ $# = 2 ] || die "usage: tools/as_needed.sh LIBRARY FOLDER"
lib=$1 out=$2
for tool in readelf nm patchelf ldd; do
  command -v "$tool" > /dev/null || die "$tool not found (apt-get install $(case $tool in patchelf) echo patchelf ;; ldd) echo libc-bin ;; *) echo binutils ;; esac); scripts/setup.sh does)"
done
[ -f "$lib" ] || die "$lib: no such file"
soname=$(readelf -d "$lib" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p') || true
[ -n "$soname" ] || die "$lib: not a shared library with a soname"
# The dynamic symbols of a library, without their versions: the ones it leaves undefined (weak
# ones too), or the ones it defines. nm, not readelf: readelf's columns shift on arm64, where a
# symbol may carry a [VARIANT_PCS] field.
symbols() {  # <library> undefined|defined
  nm -D --"$2"-only "$1" | awk '{ sub(/@.*/, "", $NF); if ($NF != "") print $NF }' | sort -u
}
undefined=$(symbols "$lib" undefined) || die "$lib: nm could not read its symbols"
declare -A path
while read -r name arrow where _; do
  [ "$arrow" = "=>" ] && [ -f "$where" ] && path[$name]=$where
done < <(ldd "$lib")
unused=()
for name in $(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
  [ -n "${path[$name]:-}" ] || continue  # not found by name (the loader itself): kept
  # A library whose symbols cannot be read is kept: only a proven-unused name is left out.
  defined=$(symbols "${path[$name]}" defined) || die "${path[$name]}: nm could not read its symbols"
  [ -z "$(comm -12 <(echo "$undefined") <(echo "$defined"))" ] && unused+=("$name")
done
mkdir -p "$out"
tmp=$(mktemp "$out/.$soname.XXXXXX")
trap 'rm -f "$tmp"' EXIT
cp "$lib" "$tmp"
args=()
for name in "${unused[@]}"; do args+=(--remove-needed "$name"); done
[ ${#args[@]} = 0 ] || patchelf "${args[@]}" "$tmp"  # once: each call writes the whole file again
chmod 644 "$tmp"
mv "$tmp" "$out/$soname"  # whole or not at all: a cut-short copy never stands in for the library
echo "${unused[*]}"
