#!/usr/bin/env bash
# Builds the userspace-proxy image from Debian packages alone, without a container engine or
# registry: a minbase Debian 12 (bookworm) root file system from mmdebstrap with iptables,
# conntrack and ca-certificates, a Node 20 binary, and the daemon deployed with its production
# dependencies only (`pnpm deploy --prod`), packed as an OCI image layout by oci-pack.mjs.
#
# Writes, under --out (default dist/image in the repository):
#   userspace-proxy-<tag>.oci/         the OCI image layout (skopeo inspect oci:<dir>:<tag>)
#   userspace-proxy-<tag>.oci.tar      the same as an archive: podman load, docker load, ctr import
#   userspace-proxy-<tag>.docker.tar   with --docker-archive (needs skopeo): for Docker < 25
#
# Needs: root (mmdebstrap's root mode, and owners preserved in the layer), mmdebstrap, GNU tar, a
# Debian mirror (--mirror), and Node 20 (--node, default the `node` on PATH: that binary goes into
# the image, so it must run on Debian 12's glibc; the `nodejs` package of Debian 12 is Node 18, too
# old). The root file system is cached in --cache by its inputs; remove it to pick up Debian updates.
#
#   deploy/image/build.sh [--out DIR] [--cache DIR] [--mirror URL] [--node PATH] [--tag TAG]
#                         [--skip-build] [--docker-archive]
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
here="$repo/deploy/image"
out="$repo/dist/image"
cache="${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/userspace-proxy-image"
mirror="${USERSPACE_PROXY_IMAGE_MIRROR:-http://deb.debian.org/debian}"
node_bin="$(command -v node || true)"
version="$(node -p "require('$repo/packages/server/package.json').version" 2>/dev/null || echo 0.1.0)"
tag="$version"
name=userspace-proxy
skip_build=false
docker_archive=false
# The Debian packages of the image. libstdc++6 is the Node binary's one library beyond libc.
packages=iptables,conntrack,ca-certificates,libstdc++6
suite=bookworm

die() {
  echo "build.sh: $*" >&2
  exit 1
}

while [ $# -gt 0 ]; do
  case "$1" in
  --out) out="$2"; shift 2 ;;
  --cache) cache="$2"; shift 2 ;;
  --mirror) mirror="$2"; shift 2 ;;
  --node) node_bin="$2"; shift 2 ;;
  --tag) tag="$2"; shift 2 ;;
  --skip-build) skip_build=true; shift ;;
  --docker-archive) docker_archive=true; shift ;;
  -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  *) die "unknown argument $1 (see --help)" ;;
  esac
done

[ "$(id -u)" = 0 ] || die "run as root: mmdebstrap builds the root file system in root mode"
command -v mmdebstrap >/dev/null || die "mmdebstrap is missing: apt-get install mmdebstrap"
[ -n "$node_bin" ] && [ -x "$node_bin" ] || die "no Node binary: give --node PATH (Node 20)"
node_version="$("$node_bin" --version)"
case "$node_version" in
v20.*) ;;
*) die "$node_bin is Node $node_version; the image needs Node 20 (give --node PATH)" ;;
esac

pnpm=(npx -y pnpm@12.4.2)
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)}"
mkdir -p "$out" "$cache"
work="$(mktemp -d "${TMPDIR:-/tmp}/userspace-proxy-image.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# 1. The daemon with its production dependencies only, as a self-contained folder.
if [ "$skip_build" = false ]; then
  echo "building the workspace" >&2
  (cd "$repo" && "${pnpm[@]}" run build >&2)
fi
echo "deploying @userspace-proxy/server with its production dependencies" >&2
(cd "$repo" && "${pnpm[@]}" --filter @userspace-proxy/server deploy --prod "$work/app" >&2)
rm -f "$work/app/pnpm-workspace.yaml"
[ -f "$work/app/dist/main.js" ] || die "the deployed daemon has no dist/main.js: build first"

# 2. The Debian root file system, cached by everything that goes into it.
key="$(printf '%s\n' "$suite" "$mirror" "$packages" minbase 1 | sha256sum | cut -c1-16)"
rootfs="$cache/rootfs-$suite-$key.tar"
if [ ! -s "$rootfs" ]; then
  echo "creating the $suite root file system from $mirror (cached in $rootfs)" >&2
  rm -rf "$rootfs.partial"
  mmdebstrap --variant=minbase --format=tar --include="$packages" \
    --aptopt='Acquire::Retries "3"' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    "$suite" "$rootfs.partial" "$mirror" >&2
  mv "$rootfs.partial" "$rootfs"
else
  echo "using the cached root file system $rootfs" >&2
fi

# 3. The image's root: Debian, Node, the daemon, the user.
root="$work/root"
mkdir "$root"
tar --extract --file="$rootfs" --directory="$root" --numeric-owner
# Engines mount their own /dev; device nodes in a layer break rootless engines (no mknod).
find "$root/dev" -mindepth 1 -delete
install -D -m 0755 -o 0 -g 0 "$node_bin" "$root/usr/local/bin/node"
cp -a "$work/app" "$root/opt/userspace-proxy"
chown -R 0:0 "$root/opt/userspace-proxy"
chmod -R u+rwX,go+rX,go-w "$root/opt/userspace-proxy"
ln -s /opt/userspace-proxy/dist/main.js "$root/usr/local/bin/userspace-proxy"
chmod 0755 "$root/opt/userspace-proxy/dist/main.js"
echo 'userspace-proxy:x:65532:65532:userspace-proxy:/nonexistent:/usr/sbin/nologin' >>"$root/etc/passwd"
echo 'userspace-proxy:x:65532:' >>"$root/etc/group"
install -d -m 0755 "$root/etc/userspace-proxy"
"$root/usr/local/bin/node" --version >/dev/null # the copied binary runs (on this host)

# 4. The OCI image layout and its archives.
layout="$out/$name-$tag.oci"
server_version="$(node -p "require('$work/app/package.json').version")"
node "$here/oci-pack.mjs" --root "$root" --layout "$layout" --name "$name" --tag "$tag" \
  --version "$server_version" \
  --comment "Debian $suite minbase with $packages; Node $node_version from $node_bin; @userspace-proxy/server $server_version"
tar --create --file="$out/$name-$tag.oci.tar" --directory="$layout" --sort=name --numeric-owner \
  --mtime=@"$SOURCE_DATE_EPOCH" oci-layout index.json blobs
if command -v skopeo >/dev/null; then
  skopeo inspect "oci:$layout:$tag" >/dev/null # the layout reads back
fi
if [ "$docker_archive" = true ]; then
  command -v skopeo >/dev/null || die "--docker-archive needs skopeo: apt-get install skopeo"
  rm -f "$out/$name-$tag.docker.tar"
  skopeo copy --quiet "oci:$layout:$tag" "docker-archive:$out/$name-$tag.docker.tar:$name:$tag" >&2
  echo "$out/$name-$tag.docker.tar"
fi
echo "$layout"
echo "$out/$name-$tag.oci.tar"
