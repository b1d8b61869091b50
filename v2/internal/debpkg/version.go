package debpkg

import (
	"strconv"
	"strings"
)

// Version is a Debian package version, [epoch:]upstream[-revision], split
// as Debian policy (section 5.6.12) splits it: the epoch ends at the first
// colon, the revision starts after the last hyphen, and a version without a
// hyphen (a native package) has no revision.
type Version struct {
	Epoch    int
	Upstream string
	Revision string
}

// ParseVersion splits v. A missing or non-numeric epoch counts as 0, which is
// how dpkg treats versions without one.
func ParseVersion(v string) Version {
	var out Version
	if i := strings.IndexByte(v, ':'); i >= 0 {
		out.Epoch, _ = strconv.Atoi(v[:i])
		v = v[i+1:]
	}
	if i := strings.LastIndexByte(v, '-'); i >= 0 {
		out.Upstream, out.Revision = v[:i], v[i+1:]
	} else {
		out.Upstream = v
	}
	return out
}

// CompareVersions orders two Debian versions as dpkg --compare-versions does:
// -1 when a is older than b, 0 when they are equal, 1 when a is newer.
func CompareVersions(a, b string) int {
	va, vb := ParseVersion(a), ParseVersion(b)
	switch {
	case va.Epoch < vb.Epoch:
		return -1
	case va.Epoch > vb.Epoch:
		return 1
	}
	if c := compareFragment(va.Upstream, vb.Upstream); c != 0 {
		return c
	}
	return compareFragment(va.Revision, vb.Revision)
}

// compareFragment compares an upstream version or a revision: alternately the
// longest non-digit prefixes (character by character, with '~' before
// everything, even the end, and letters before other characters) and the
// longest digit prefixes (as numbers).
func compareFragment(a, b string) int {
	for a != "" || b != "" {
		var na, nb string
		na, a = splitPrefix(a, false)
		nb, b = splitPrefix(b, false)
		if c := compareNonDigits(na, nb); c != 0 {
			return c
		}
		var da, db string
		da, a = splitPrefix(a, true)
		db, b = splitPrefix(b, true)
		if c := compareDigits(da, db); c != 0 {
			return c
		}
	}
	return 0
}

func splitPrefix(s string, digits bool) (prefix, rest string) {
	i := 0
	for i < len(s) && isDigit(s[i]) == digits {
		i++
	}
	return s[:i], s[i:]
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func compareNonDigits(a, b string) int {
	for i := 0; i < len(a) || i < len(b); i++ {
		var ca, cb int
		if i < len(a) {
			ca = order(a[i])
		}
		if i < len(b) {
			cb = order(b[i])
		}
		if ca != cb {
			if ca < cb {
				return -1
			}
			return 1
		}
	}
	return 0
}

// order is dpkg's weight of one character of a non-digit part; the end of
// the part weighs 0.
func order(c byte) int {
	switch {
	case c == '~':
		return -1
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		return int(c)
	default:
		return int(c) + 256
	}
}

func compareDigits(a, b string) int {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	switch {
	case len(a) != len(b):
		if len(a) < len(b) {
			return -1
		}
		return 1
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
