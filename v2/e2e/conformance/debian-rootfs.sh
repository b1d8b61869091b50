#!/bin/bash
# debian-rootfs.sh DEST SUITE NAME...
#
# Makes the Debian root file system of the upstream e2e tests' images (make
# conformance-rootfs): debootstrap --variant=minbase of SUITE with the named
# packages, into DEST/rootfs, with the installed versions in
# DEST/packages.txt. debootstrap sees only the suite's release archive (not
# its -updates or -security archives), so the packages are named without
# versions: whatever the release archive has is taken, and recorded. Packages
# come from the Debian archive this machine's apt uses (DEBIAN_MIRROR
# overrides it).
#
# Nothing runs in the machine's network namespace but the downloads: the
# packages are fetched and unpacked first (debootstrap --foreign), then their
# scripts run in a chroot inside new network, mount and PID namespaces
# (nginx's postinst cannot start a server anywhere that matters, and the
# chroot's /proc mount vanishes with its namespace).
set -euo pipefail

dest=${1:?usage: debian-rootfs.sh DEST SUITE NAME...}
suite=${2:?usage: debian-rootfs.sh DEST SUITE NAME...}
shift 2

# The archive of the machine's apt sources: the first URI of a Debian
# archive (one ending in /debian) in a deb822 .sources file or a one-line
# sources.list entry.
mirror=${DEBIAN_MIRROR:-$(
	{ grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | tr ' ' '\n' | grep -E '^[a-z]+://'
	  grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}'
	} | awk '/\/debian\/?$/ && !found { print; found = 1 }' || true
)}
if [ -z "$mirror" ]; then
	echo "debian-rootfs.sh: found no Debian archive in /etc/apt/sources.list*; set DEBIAN_MIRROR" >&2
	exit 1
fi

names=$(printf '%s\n' "$@" | paste -sd, -)
tmp=$dest.tmp
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

echo "    debootstrap $suite (minbase) with $names: download and unpack" >&2
debootstrap --foreign --variant=minbase --arch=amd64 --include="$names" "$suite" "$tmp/rootfs" "$mirror" \
	>"$tmp/debootstrap-1.log" 2>&1 || { tail -20 "$tmp/debootstrap-1.log" >&2; exit 1; }
echo "    debootstrap: configure the packages (in their own namespaces)" >&2
unshare --net --mount --pid --fork --mount-proc="$tmp/rootfs/proc" \
	chroot "$tmp/rootfs" /debootstrap/debootstrap --second-stage \
	>"$tmp/debootstrap-2.log" 2>&1 || { tail -20 "$tmp/debootstrap-2.log" >&2; exit 1; }

dpkg-query --admindir="$tmp/rootfs/var/lib/dpkg" -W -f='${Package}=${Version}\n' >"$tmp/packages.txt"
missing=""
for name in "$@"; do
	have=$(dpkg-query --admindir="$tmp/rootfs/var/lib/dpkg" -W -f='${Version}' "$name" 2>/dev/null || true)
	if [ -z "$have" ]; then missing="$missing $name"; else echo "    installed $name=$have" >&2; fi
done
if [ -n "$missing" ]; then
	echo "debian-rootfs.sh: debootstrap did not install:$missing" >&2
	exit 1
fi
trap - EXIT
rm -rf "$dest"
mv "$tmp" "$dest"
