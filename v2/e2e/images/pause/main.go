// Command pause is the sandbox ("pause") container of vcoil's local cluster:
// it holds a pod's namespaces, reaps the orphans that end up as its children
// (it is PID 1 of the pod when the pod shares its PID namespace), and exits on
// SIGTERM or SIGINT. It replaces registry.k8s.io/pause, which the lab cannot
// pull.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("vcoil pause")
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
