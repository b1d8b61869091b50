package lbipam

import (
	"net/netip"
	"reflect"
	"testing"
)

func TestParseRequestReadsLoadBalancerIPAndTheAnnotation(t *testing.T) {
	for _, tc := range []struct {
		name, lbIP, annotation string
		want                   Request
		badFamilies            []Family // nil: no error
		badAll                 bool     // the whole request is bad
	}{
		{name: "nothing requested", want: Request{}},
		{name: "spec.loadBalancerIP alone", lbIP: "203.0.113.5", want: Request{IPv4: netip.MustParseAddr("203.0.113.5")}},
		{name: "the annotation with one address per family", annotation: "fd00:1b::5, 203.0.113.5",
			want: Request{IPv4: netip.MustParseAddr("203.0.113.5"), IPv6: netip.MustParseAddr("fd00:1b::5")}},
		{name: "both naming the same address", lbIP: "203.0.113.5", annotation: "203.0.113.5",
			want: Request{IPv4: netip.MustParseAddr("203.0.113.5")}},
		{name: "two IPv4 addresses spoil IPv4 only", lbIP: "203.0.113.5", annotation: "203.0.113.6,fd00:1b::5",
			want: Request{IPv6: netip.MustParseAddr("fd00:1b::5")}, badFamilies: []Family{IPv4}},
		{name: "text that is no address spoils the whole request", annotation: "203.0.113.5,lb.example",
			badAll: true},
		{name: "a CIDR is no address", annotation: "203.0.113.0/30", badAll: true},
		{name: "an IPv4-mapped IPv6 address is refused", annotation: "::ffff:203.0.113.5", badAll: true},
		{name: "a zone is refused", annotation: "fe80::1%eth0", badAll: true},
		{name: "empty items are ignored", annotation: " , 203.0.113.5 ,", want: Request{IPv4: netip.MustParseAddr("203.0.113.5")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRequest(tc.lbIP, tc.annotation)
			switch {
			case tc.badAll:
				if err == nil || len(err.Families) != 0 || got != nil {
					t.Fatalf("ParseRequest = %v, %v; want an error spoiling the whole request", got, err)
				}
				return
			case tc.badFamilies != nil:
				if err == nil || !reflect.DeepEqual(err.Families, tc.badFamilies) {
					t.Fatalf("error %v, want one for families %v", err, tc.badFamilies)
				}
			case err != nil:
				t.Fatalf("unexpected error %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseRequest = %v, want %v", got, tc.want)
			}
		})
	}
}

func FuzzParseRequestNeverGivesTwoOfAFamily(f *testing.F) {
	f.Add("203.0.113.5", "fd00::1,203.0.113.6")
	f.Fuzz(func(t *testing.T, lbIP, annotation string) {
		req, err := ParseRequest(lbIP, annotation)
		if err != nil && len(err.Families) == 0 && req != nil {
			t.Fatalf("a request spoiled as a whole returned addresses %v", req)
		}
		for f, a := range req {
			if FamilyOf(a) != f || a.Zone() != "" {
				t.Fatalf("request %v files %s under %s", req, a, f)
			}
		}
	})
}
