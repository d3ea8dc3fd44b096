#!/bin/bash
# Builds the Debian package of shortfirst from an already built release binary, with
# dpkg-deb (no rebuild, no tool to install): the binary, the systemd units, the example
# configurations as conffiles under /etc/shortfirst, the Grafana dashboard, the Prometheus
# rules and the docs. Reproducible: files owned by root, times from SOURCE_DATE_EPOCH
# (default: the last commit's time).
#
#   deploy/build-deb.sh BIN OUT_DIR     prints the path of the .deb it wrote
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 BIN OUT_DIR" >&2
    exit 2
fi
bin=$1
out_dir=$2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
[ -x "$bin" ] || { echo "build-deb: $bin: no executable binary (run make build)" >&2; exit 1; }

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml")
[ -n "$version" ] || { echo "build-deb: no version in [workspace.package] of $repo/Cargo.toml" >&2; exit 1; }
arch=$(dpkg --print-architecture)

# Shared libraries the binary links against, as Debian package dependencies. Rust
# binaries need only glibc and libgcc_s; anything else is an error to look at.
glibc=$(objdump -T "$bin" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
shlibs="libc6 (>= $glibc)"
for lib in $(readelf -d "$bin" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
    case $lib in
        libc.so.6 | libm.so.6 | ld-linux-*.so.* | libpthread.so.0 | libdl.so.2 | librt.so.1) ;;
        libgcc_s.so.1) shlibs="$shlibs, libgcc-s1" ;;
        *) echo "build-deb: $bin needs $lib: add its package to deploy/build-deb.sh" >&2; exit 1 ;;
    esac
done

deb=$out_dir/shortfirst_${version}_${arch}.deb
stage=$(mktemp -d)
trap 'rm -rf "$stage" "$deb.tmp"' EXIT
root=$stage/root
install -d "$root/DEBIAN"
install -D -m 755 "$bin" "$root/usr/bin/shortfirst"
strip --strip-unneeded "$root/usr/bin/shortfirst"
for unit in "$here"/systemd/*.service; do
    install -D -m 644 "$unit" "$root/lib/systemd/system/$(basename "$unit")"
done
for conf in "$here"/etc/*; do
    install -D -m 644 "$conf" "$root/etc/shortfirst/$(basename "$conf")"
done
doc=$root/usr/share/doc/shortfirst
install -D -m 644 "$repo/docs/deploy.md" "$doc/deploy.md"
install -D -m 644 "$repo/crates/server/serve.example.toml" "$doc/serve.example.toml"
install -D -m 644 "$repo/crates/gatekeeper/gatekeeper.example.toml" "$doc/gatekeeper.example.toml"
install -D -m 644 "$here/debian/copyright" "$doc/copyright"
install -D -m 644 "$here/grafana/shortfirst.json" "$root/usr/share/shortfirst/grafana/shortfirst.json"
install -D -m 644 "$here/prometheus/shortfirst.rules.yml" "$root/usr/share/shortfirst/prometheus/shortfirst.rules.yml"
for script in postinst prerm postrm; do
    install -m 755 "$here/debian/$script" "$root/DEBIAN/$script"
done
(cd "$root" && find etc -type f | sed 's|^|/|' | sort) > "$root/DEBIAN/conffiles"
chmod 644 "$root/DEBIAN/conffiles"

size_kb=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SHLIBS@/$shlibs/" \
    -e "s/@SIZE_KB@/$size_kb/" "$here/debian/control.in" > "$root/DEBIAN/control"

export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)}
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
mkdir -p "$out_dir"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb.tmp" >/dev/null
mv "$deb.tmp" "$deb"
echo "$deb"
