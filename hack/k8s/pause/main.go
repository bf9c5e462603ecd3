// Command pause is the sandbox ("pause") container of the real-node cluster
// (hack/k8s): it holds a pod's namespaces open and does nothing else. As
// PID 1 of a pod that shares its process namespace it also reaps orphans.
// It exits 0 on SIGINT or SIGTERM. Built static, it is the only file of the
// image felix.local/pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
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
