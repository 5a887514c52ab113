#!/bin/sh
# The application library links no storage engine: the probe app (linked
# with --no-as-needed, so every shared library on its link line is listed)
# needs no librocksdb and holds no RocksDB symbol. It does need libprotobuf,
# which shows the check reads the right list.
set -eu
probe="$1"
needed="$(readelf -d "$probe" | grep NEEDED)" || { echo "check_app_link: readelf failed on $probe"; exit 1; }
echo "$needed" | grep -q libprotobuf || { echo "check_app_link: no NEEDED entries read from $probe"; exit 1; }
if echo "$needed" | grep -i rocksdb; then
  echo "check_app_link: the application library links RocksDB (above)"; exit 1
fi
if nm -C "$probe" | grep -i 'rocksdb::' | head -5 | grep .; then
  echo "check_app_link: the application library holds RocksDB code (above)"; exit 1
fi
echo "check_app_link: $probe links no RocksDB"
