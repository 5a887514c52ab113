#!/usr/bin/env bash
# The client library as an application gets it: `cmake --install` into a
# fresh prefix, then examples/standalone (its own CMakeLists.txt, nothing
# from this tree) configured with find_package(megastore) and built, the
# same app built by hand with pkg-config, and both run against a
# megastored from the prefix.
#   install_test.sh BUILD_DIR SOURCE_DIR BUILD_TYPE
set -euo pipefail
build="$(cd "$1" && pwd)"; src="$(cd "$2" && pwd)"; type="${3:-Release}"
case "$type" in
  Asan|Tsan)  # instrumented libraries need the sanitizer's runtime in the app too
    echo "install_test: skipped in a $type build (the installed libraries are instrumented)"
    exit 77 ;;
esac
# Under the build directory: fixed paths, so ccache hits from run to run.
tmp="$build/install-test"
rm -rf "$tmp"; mkdir -p "$tmp"
export CCACHE_BASEDIR="$tmp"
server=""
cleanup() {
  if [ -n "$server" ]; then
    kill "$server" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "install_test: $*" >&2; exit 1; }

prefix="$tmp/prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install failed"; }
for f in bin/msc bin/megastored bin/msadmin lib/cmake/megastore/megastoreConfig.cmake \
         lib/cmake/megastore/megastoreTargets.cmake lib/pkgconfig/megastore.pc lib/megastore/libms_client.a; do
  [ -e "$prefix/$f" ] || fail "$f was not installed"
done
# The public headers, and none of the internals.
headers="$(cd "$prefix/include/megastore" && find . -type f | sed 's|^\./||' | sort | tr '\n' ' ')"
want="api/connect.h api/database.h base/strings.h base/version.h replication/client_options.h schema/entity.h schema/key_codec.h schema/schema.pb.h txn/types.h "
[ "$headers" = "$want" ] || fail "installed headers: $headers; expected: $want"

# 1. CMake: find_package(megastore), megastore_schema(), megastore::client.
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "$src/examples/standalone" -B "$tmp/app" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}" >"$tmp/configure.log" 2>&1 ||
  { cat "$tmp/configure.log"; fail "configuring examples/standalone failed"; }
cmake --build "$tmp/app" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "building examples/standalone failed"; }

# 2. pkg-config: the same sources by hand.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
pkg-config --exists megastore || fail "pkg-config does not find megastore: $(pkg-config --print-errors megastore 2>&1)"
# Each public header compiles on its own: it includes everything it needs.
for h in $headers; do
  # shellcheck disable=SC2046
  echo "#include \"$h\"" | ${CXX:-c++} -fsyntax-only -x c++ - $(pkg-config --cflags megastore) 2>"$tmp/header.log" ||
    { cat "$tmp/header.log"; fail "the installed $h does not compile on its own"; }
done
mkdir -p "$tmp/pc"
"$prefix/bin/msc" "$src/examples/standalone/Notes.msdl" --out="$tmp/pc" >/dev/null
# shellcheck disable=SC2046
${CXX:-c++} -O1 -o "$tmp/pc/notes" -I"$tmp/pc" "$src/examples/standalone/main.cc" "$tmp/pc/Notes.schema.cc" \
  $(pkg-config --cflags --libs megastore) >"$tmp/pc.log" 2>&1 || { cat "$tmp/pc.log"; fail "building with pkg-config failed"; }

# 3. Both against a cluster from the prefix.
"$prefix/bin/megastored" --local=1 --data="$tmp/data" --schema="$tmp/pc/Notes.schema.pb" --no-tls --no-sync \
  --log-level=warn >"$tmp/server.log" 2>&1 &
server=$!
for _ in $(seq 300); do grep -q "megastored: ready" "$tmp/server.log" && break; sleep 0.1; done
grep -q "megastored: ready" "$tmp/server.log" || { cat "$tmp/server.log"; fail "megastored did not start"; }
config="$tmp/data/cluster.textproto"
out1="$("$tmp/app/notes" --config="$config" --datacenter=A "first")" || fail "the CMake-built app failed: $out1"
out2="$("$tmp/pc/notes" --config="$config" --datacenter=A "second")" || fail "the pkg-config-built app failed: $out2"
grep -q "added note 1 " <<<"$out1" || fail "unexpected: $out1"
grep -q "added note 2 " <<<"$out2" || fail "unexpected: $out2"
grep -q "2: second" <<<"$out2" && grep -q "1: first" <<<"$out2" || fail "the notes did not come back: $out2"
if "$tmp/app/notes" --config="$config" --datacenter=Z x 2>"$tmp/err"; then fail "an unknown datacenter was accepted"; fi
grep -q 'datacenter "Z" is not in' "$tmp/err" || fail "unclear error: $(cat "$tmp/err")"
echo "install_test: installed, built with CMake and with pkg-config, ran: ok"
