package nft

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"
)

// WriteElements shares a command between consecutive ops of one set and
// kind, a thousand elements at the most, and writes a delete's key only.
func TestWriteElementsBatchesBySetAndKind(t *testing.T) {
	id := TableID{Family: knftables.InetFamily, Name: "t"}
	var b strings.Builder
	WriteElements(&b, id, []ElementOp{
		{Set: "in4", Key: []string{"10.1.0.1"}, Value: []string{"jump g1"}},
		{Set: "in4", Key: []string{"10.1.0.2"}, Value: []string{"jump g2"}},
		{Set: "be4", Key: []string{"10.0.0.1", "tcp", "80"}, Value: []string{"10.2.0.1", "8080"}},
		{Set: "be4", Delete: true, Key: []string{"10.0.0.1", "tcp", "80"}, Value: []string{"10.2.0.1", "8080"}},
		{Set: "in4", Delete: true, Key: []string{"10.1.0.1"}},
	})
	want := "add element inet t in4 { 10.1.0.1 : jump g1, 10.1.0.2 : jump g2 }\n" +
		"add element inet t be4 { 10.0.0.1 . tcp . 80 : 10.2.0.1 . 8080 }\n" +
		"delete element inet t be4 { 10.0.0.1 . tcp . 80 }\n" +
		"delete element inet t in4 { 10.1.0.1 }\n"
	if b.String() != want {
		t.Errorf("WriteElements wrote\n%s\nwant\n%s", b.String(), want)
	}

	// More than a command holds: two commands, which nft (here the Fake)
	// applies.
	var ops []ElementOp
	for i := range elementsPerCommand + 1 {
		ops = append(ops, ElementOp{Set: "h4", Key: []string{fmt.Sprintf("10.9.%d.%d", i/250, i%250+1)}})
	}
	b.Reset()
	WriteElements(&b, id, ops)
	if n := strings.Count(b.String(), "add element inet t h4 {"); n != 2 {
		t.Fatalf("%d elements in %d commands, want 2:\n%.300s", len(ops), n, b.String())
	}
	f := NewFake(knftables.InetFamily, "t", testLayouts)
	makeTestTable(t, f)
	ctx := context.Background()
	if err := f.RunScript(ctx, b.String()); err != nil {
		t.Fatal(err)
	}
	elems, err := f.Elements(ctx, "h4")
	if err != nil || len(elems) < len(ops) {
		t.Errorf("h4 holds %d elements (%v), want at least %d", len(elems), err, len(ops))
	}
}
