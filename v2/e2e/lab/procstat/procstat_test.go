package procstat

import (
	"os"
	"strconv"
	"testing"
)

func TestFieldsOfThisProcessStartWithItsStateAndParent(t *testing.T) {
	f, err := Fields(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if len(f) < 20 || f[0] != "R" && f[0] != "S" {
		t.Fatalf("fields %v", f)
	}
	if ppid, _ := strconv.Atoi(f[1]); ppid != os.Getppid() {
		t.Errorf("parent %s, want %d", f[1], os.Getppid())
	}
	if _, err := Fields(-1); err == nil {
		t.Error("no error for a process that cannot exist")
	}
}
