package lbipam

import (
	"net/netip"
	"reflect"
	"testing"
)

func TestTableGivesAnAddressToOneHolder(t *testing.T) {
	tb := NewTable()
	a, b := netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("fd00:1b::1")
	if !tb.Assign(a, "ns/one") || !tb.Assign(b, "ns/one") {
		t.Fatal("assigning free addresses failed")
	}
	if !tb.Assign(a, "ns/one") {
		t.Error("assigning an address to its holder again failed")
	}
	if tb.Assign(a, "ns/two") {
		t.Error("an address held by ns/one was given to ns/two")
	}
	if h, ok := tb.Holder(netip.MustParseAddr("::ffff:203.0.113.1")); !ok || h != "ns/one" {
		t.Errorf("Holder of the mapped form = %q, %v; want ns/one", h, ok)
	}
	if got := tb.Used(IPv4); !reflect.DeepEqual(got, []netip.Addr{a}) {
		t.Errorf("Used(IPv4) = %v", got)
	}
	if released := tb.Keep("ns/one", []netip.Addr{b}); !reflect.DeepEqual(released, []netip.Addr{a}) {
		t.Errorf("Keep released %v, want %v", released, a)
	}
	if got := tb.Used(IPv4); len(got) != 0 {
		t.Errorf("Used(IPv4) after the release = %v, want none", got)
	}
	if !tb.Assign(a, "ns/two") {
		t.Error("a released address could not be given again")
	}
	c := netip.MustParseAddr("203.0.113.0")
	tb.Assign(c, "ns/three")
	if got := tb.Used(IPv4); !reflect.DeepEqual(got, []netip.Addr{c, a}) {
		t.Errorf("Used(IPv4) = %v, want %v sorted", got, []netip.Addr{c, a})
	}
	tb.Release("ns/three")
	if released := tb.Release("ns/one"); !reflect.DeepEqual(released, []netip.Addr{b}) || tb.Len() != 1 {
		t.Errorf("Release = %v, table holds %d; want %v and 1", released, tb.Len(), b)
	}
	if got := tb.Held("ns/two"); !reflect.DeepEqual(got, []netip.Addr{a}) {
		t.Errorf("Held(ns/two) = %v", got)
	}
}
