#!/usr/bin/env bash
# Note [Debian's LibTorch as --as-needed links it] (CMakeLists.txt), held:
#   1. tools/as_needed.sh on a library made here, which names libz, libdep (ours) and libm, and
#      calls cos() and dep(): the copy names libdep, libm and libc, not libz, and a program on the
#      copy starts with every symbol resolved (LD_BIND_NOW=1). Left out by hand, libdep is missed
#      only by LD_BIND_NOW=1's start (the plain start binds lazily and runs, since the program
#      never calls dep()): why part 2 starts every program that way. Bad input exits 2;
#   2. in a build on Debian's LibTorch, every program of the build loads libtorch_cpu.so.1.13 from
#      the build's copy, loads fewer libraries than with Debian's own list, and starts with
#      LD_BIND_NOW=1 (every symbol each loaded library or the program names, resolved before
#      main()); the copy is Debian's library byte for byte outside its .dynamic section, and is
#      what the tool makes of it again. A build on the pip wheel's LibTorch has no copy: exit 77,
#      saying so;
#   3. bench/program_start.py runs (a start each way to warm up, then one each way), and its file
#      holds what 2 found.
# Usage: tests/as_needed_test.sh <build folder>
# No `producer | grep -q` here: under pipefail, grep's early exit fails the producer (SIGPIPE)
# now and then, which once skipped a program; each output is read whole, then searched.
set -uo pipefail
build=$(cd "${1:?usage: tests/as_needed_test.sh <build folder>}" && pwd -P)  # as ldd prints paths
root=$(cd "$(dirname "$0")/.." && pwd)
tool=$root/tools/as_needed.sh
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ddp-as-needed-test.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
source "$(dirname "$0")/expect.sh"  # fail, expect
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

# 1. The tool, on a library whose answer is known.
for t in cc patchelf; do command -v $t > /dev/null || { fail "$t not found (scripts/setup.sh installs it)"; exit 1; }; done
cat > "$scratch/dep.c" <<'EOF'
double dep(double x) { return x + 1; }
EOF
cat > "$scratch/pair.c" <<'EOF'
#include <math.h>
double dep(double x);
double pair(double x) { return cos(x); }
double unused_here(double x) { return dep(x); }
EOF
cat > "$scratch/main.c" <<'EOF'
#include <stdio.h>
double pair(double x);
int main(void) { printf("%.1f\n", pair(0.0)); return 0; }
EOF
cc -shared -fPIC -o "$scratch/libdep.so" -Wl,-soname,libdep.so "$scratch/dep.c" &&
  cc -shared -fPIC -o "$scratch/libpair.so.1" -Wl,-soname,libpair.so.1 -Wl,-z,lazy "$scratch/pair.c" \
    -Wl,--no-as-needed -lz -L"$scratch" -ldep -lm ||
  { fail "cc could not build the test's libraries"; exit 1; }
grep -qx libz.so.1 <<< "$(needed "$scratch/libpair.so.1")" || fail "the test's library does not name libz.so.1 (--no-as-needed)"
expect "a library naming libz, libdep and libm, calling cos() and dep()" 0 "^libz\.so\.1$" -- \
  env LD_LIBRARY_PATH="$scratch" "$tool" "$scratch/libpair.so.1" "$scratch/copy"
[ "$(needed "$scratch/copy/libpair.so.1" | sort | tr '\n' ' ')" = "$(needed "$scratch/libpair.so.1" | grep -vx libz.so.1 | sort | tr '\n' ' ')" ] ||
  fail "the copy names $(needed "$scratch/copy/libpair.so.1" | tr '\n' ' '), not the library's names without libz.so.1"
cc -o "$scratch/main" "$scratch/main.c" -L"$scratch" -l:libpair.so.1 -Wl,-rpath,"$scratch/copy:$scratch" -Wl,--disable-new-dtags
expect "a program on the copy, every symbol resolved at its start" 0 "^1\.0$" -- env LD_BIND_NOW=1 "$scratch/main"
# What part 2's LD_BIND_NOW start would find: a copy without a name a symbol comes from.
patchelf --remove-needed libdep.so "$scratch/copy/libpair.so.1"
expect "libdep left out by hand: a plain start binds lazily and runs" 0 "^1\.0$" -- "$scratch/main"
expect "libdep left out by hand: with LD_BIND_NOW=1 the start fails" 127 "undefined symbol: dep" -- env LD_BIND_NOW=1 "$scratch/main"
expect "no arguments" 2 "usage: tools/as_needed.sh LIBRARY FOLDER" -- "$tool"
echo "not a library" > "$scratch/text"
expect "a text file" 2 "not a shared library with a soname" -- "$tool" "$scratch/text" "$scratch/copy2"
expect "a missing file" 2 "no such file" -- "$tool" "$scratch/missing.so" "$scratch/copy2"
[ ! -e "$scratch/copy2" ] || [ -z "$(ls -A "$scratch/copy2")" ] || fail "bad input left a file in the output folder"

# 2. This build.
copy_dir=$build/libtorch-as-needed
if [ ! -d "$copy_dir" ]; then
  if grep -q "site-packages/torch/lib/libtorch_cpu" <<< "$(ldd "$build/05_ddp")"; then
    echo "SKIPPED: this build's LibTorch is the pip wheel's, loaded as it is (it names no library it takes nothing from but glibc's stubs)"
    exit 77
  fi
  fail "$build is built on Debian's LibTorch, but has no libtorch-as-needed/ (CMakeLists.txt makes it when it configures)"
  exit 1
fi
copy=$(ls "$copy_dir"/libtorch_cpu.so.* 2> /dev/null | head -n 1)
[ -n "$copy" ] || { fail "no libtorch_cpu.so.* in $copy_dir"; exit 1; }
soname=$(basename "$copy")
# Debian's library: where the loader finds it for 05_ddp with the program's RPATH ignored (the
# loader names the program's own entry "", so --inhibit-rpath "" ignores the program's RPATH).
interp=$(readelf -l "$build/05_ddp" | sed -n 's/.*Requesting program interpreter: \(.*\)\]/\1/p')
debian=$("$interp" --inhibit-rpath "" --list "$build/05_ddp" | awk -v s="$soname" '$1 == s { print $3 }')
[ -f "$debian" ] || { fail "the loader finds no $soname for 05_ddp without its RPATH"; exit 1; }
debian=$(readlink -f "$debian")
echo "--- the copy: $copy, of $debian"
# The copy is what the tool makes of Debian's library, and differs from it only in .dynamic.
left_out=$("$tool" "$debian" "$scratch/again") || fail "as_needed.sh failed on $debian"
echo "    left out: $left_out"
cmp -s "$copy" "$scratch/again/$soname" || fail "the build's copy is not what as_needed.sh makes of $debian now"
[ "$(stat -c %s "$copy")" = "$(stat -c %s "$debian")" ] || fail "the copy's size differs from $debian's"
read -r dyn_start dyn_size < <(readelf -S -W "$copy" | sed 's/\[ */[/' | awk '$2 == ".dynamic" { print $5, $6 }')
[ -n "${dyn_start:-}" ] || fail "the copy has no .dynamic section"
dyn_start=$((16#${dyn_start:-0})) dyn_size=$((16#${dyn_size:-0}))
diff_bytes=$(cmp -l "$debian" "$copy")  # once: each cmp reads both 120 MB files
outside=$(awk -v s="${dyn_start:-0}" -v n="${dyn_size:-0}" 'NF && ($1 - 1 < s || $1 - 1 >= s + n)' <<< "$diff_bytes" | wc -l)
differing=$(grep -c . <<< "$diff_bytes")
echo "    $differing bytes differ, $outside of them outside .dynamic (file offset $dyn_start, $dyn_size bytes)"
[ "$outside" = 0 ] || fail "$outside bytes of the copy differ from $debian's outside its .dynamic section"
for name in $left_out; do
  grep -qx "$name" <<< "$(needed "$debian")" || fail "$name was left out, but $debian does not name it"
  ! grep -qx "$name" <<< "$(needed "$copy")" || fail "the copy still names $name"
done
[ "$(needed "$copy" | wc -l)" = $(($(needed "$debian" | wc -l) - $(wc -w <<< "$left_out"))) ] ||
  fail "the copy names $(needed "$copy" | wc -l) libraries, not Debian's $(needed "$debian" | wc -l) less the $(wc -w <<< "$left_out") left out"
# Every program of the build: the copy loaded, fewer libraries, every symbol resolved at its start.
programs=0 checked=""
for prog in "$build"/* "$build"/tests/ddp_tests "$build"/tests/ddp_unit_tests; do
  [ -f "$prog" ] && [ -x "$prog" ] || continue
  grep -q "libtorch_cpu" <<< "$(ldd "$prog" 2> /dev/null)" || continue
  programs=$((programs + 1))
  name=${prog#"$build"/}
  checked+=" $name"
  before=$failures
  loaded=$(ldd "$prog" | awk -v s="$soname" '$1 == s { print $3 }')
  [ "$loaded" = "$copy" ] || fail "$name loads $soname from ${loaded:-nowhere}, not from the copy"
  interp=$(readelf -l "$prog" | sed -n 's/.*Requesting program interpreter: \(.*\)\]/\1/p')
  with_copy=$(ldd "$prog" | wc -l)
  with_debians=$("$interp" --inhibit-rpath "" --list "$prog" | wc -l) || fail "$name: the loader could not list it without its RPATH"
  [ "$with_copy" -lt "$with_debians" ] || fail "$name loads $with_copy libraries with the copy, not fewer than $with_debians with Debian's"
  case $name in tests/*) args=(--gtest_list_tests) ;; *) args=(--help) ;; esac
  LD_BIND_NOW=1 "$prog" "${args[@]}" > "$scratch/out" 2>&1 ||
    fail "$name ${args[*]} with LD_BIND_NOW=1: exit $?: $(tail -n 3 "$scratch/out")"
  [ $failures != "$before" ] ||
    echo "ok $name: $soname from the copy, $with_copy libraries loaded (with Debian's list: $with_debians), every symbol resolved at its start"
done
# 3. The benchmark of what each start saves (bench/program_start.py): it runs, and what it writes
# is what this test found (its timings are the machine's, and not judged here).
DDP_RESULTS_DIR=$scratch/results python3 "$root/bench/program_start.py" --repeats 1 "$build" > "$scratch/bench.log" 2>&1 ||
  fail "bench/program_start.py: exit $?: $(tail -n 3 "$scratch/bench.log")"
python3 - "$scratch/results/program_start.json" "$left_out" "$checked" <<'PY' || fail "bench/program_start.py's result file disagrees with this test (above)"
import json, sys
r = json.load(open(sys.argv[1]))
problems = []
if " ".join(r["left_out"]) != sys.argv[2]:
    problems.append(f"left out {r['left_out']}, not {sys.argv[2]}")
chapters = sorted(n for n in sys.argv[3].split() if n[:2].isdigit())
if sorted(r["programs"]) != chapters:
    problems.append(f"measured {sorted(r['programs'])}, not the chapters that load LibTorch {chapters}")
for name, row in r["programs"].items():
    if not row["libraries"]["copy"] < row["libraries"]["debian"]:
        problems.append(f"{name}: {row['libraries']} libraries")
print("\n".join(problems) or "ok bench/program_start.py: " + ", ".join(f"{n} {r['programs'][n]['libraries']}" for n in chapters))
sys.exit(1 if problems else 0)
PY
[[ " $checked " == *" 05_ddp "* ]] || fail "05_ddp is not among the programs of $build that load LibTorch ($checked): the build is incomplete"
[ $failures = 0 ] && echo "PASS: $programs programs load Debian's LibTorch without the $(wc -w <<< "$left_out") libraries it names but takes no symbol from"
exit $((failures > 0))
