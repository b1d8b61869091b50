package lbipam

import (
	"fmt"
	"net/netip"
	"strings"
)

// Request is the addresses a Service asks for, at most one per family.
type Request map[Family]netip.Addr

// RequestError is a request that cannot be honoured as written. Families
// names the families it spoils (a family asked for twice); empty means the
// whole request (text that is no address: vcoil cannot tell which family it
// was meant for).
type RequestError struct {
	Families []Family
	Reason   string
}

func (e *RequestError) Error() string { return e.Reason }

// ParseRequest reads a Service's requested addresses: spec.loadBalancerIP
// (deprecated upstream) and the comma-separated vcoil.io/lb-ips annotation.
// Both may name the same address; two different addresses of one family are
// an error for that family, which then gets no requested address, while the
// other family's request stands.
func ParseRequest(loadBalancerIP, annotation string) (Request, *RequestError) {
	req := Request{}
	var bad []Family
	var words []string
	if s := strings.TrimSpace(loadBalancerIP); s != "" {
		words = append(words, s)
	}
	for _, w := range strings.Split(annotation, ",") {
		if w = strings.TrimSpace(w); w != "" {
			words = append(words, w)
		}
	}
	for _, w := range words {
		a, err := netip.ParseAddr(w)
		if err != nil || a.Zone() != "" || a.Is4In6() {
			return nil, &RequestError{Reason: fmt.Sprintf("%q is not an IPv4 or IPv6 address", w)}
		}
		f := FamilyOf(a)
		if old, ok := req[f]; ok && old != a {
			bad = append(bad, f)
			continue
		}
		req[f] = a
	}
	if len(bad) == 0 {
		return req, nil
	}
	msg := make([]string, 0, len(bad))
	for _, f := range bad {
		msg = append(msg, fmt.Sprintf("two %s addresses are requested (%s and more); at most one per family", f, req[f]))
		delete(req, f)
	}
	return req, &RequestError{Families: bad, Reason: strings.Join(msg, "; ")}
}
