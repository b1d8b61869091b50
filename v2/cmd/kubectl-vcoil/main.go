// Command kubectl-vcoil is vcoil's kubectl plugin: copied onto the PATH, it
// runs as `kubectl vcoil`. Its verbs show vcoil's pools and blocks, what a
// node's vcoild holds for a pod or for the whole node, and the verdict of
// vcoil's model on one flow (package kubectlvcoil; docs/kubectl-vcoil.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"

	"github.com/vcoil/vcoil/v2/pkg/kubectlvcoil"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := kubectlvcoil.NewCommand(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err == nil {
		return
	}
	var exit *kubectlvcoil.ExitError
	if errors.As(err, &exit) {
		if exit.Err != nil {
			fmt.Fprintln(os.Stderr, "error:", exit.Err)
		}
		os.Exit(exit.Code)
	}
	fmt.Fprintln(os.Stderr, "error:", err)
	os.Exit(kubectlvcoil.ExitFailure)
}
