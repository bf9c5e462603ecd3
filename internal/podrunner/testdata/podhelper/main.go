// Command podhelper is the container program of the podrunner tests. It
// appends a line to <data-dir>/starts, then records its command line and
// environment in <data-dir>/<name>.json, and serves /ready and /live on
// --http until SIGTERM (or, with --ignore-term, until SIGKILL); /live fails while <data-dir>/unhealthy exists. With
// --exit N it exits with code N at once instead.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

func main() {
	dataDir := flag.String("data-dir", "", "directory to write into")
	name := flag.String("name", "main", "name of the record file")
	addr := flag.String("http", "", "address for /ready and /live")
	exit := flag.Int("exit", -1, "exit at once with this code")
	ignoreTerm := flag.Bool("ignore-term", false, "ignore SIGTERM (only SIGKILL stops it)")
	bootFile := flag.String("boot-id-file", "", "file holding the boot id, recorded as \"boot\"")
	flag.Parse()
	if *dataDir != "" {
		// The start line first: tests that see the record file with this
		// pid then find its line in starts too.
		f, err := os.OpenFile(filepath.Join(*dataDir, "starts"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		must(err)
		_, _ = fmt.Fprintf(f, "%s %d\n", *name, os.Getpid())
		must(f.Close())
		rec := map[string]any{"args": os.Args[1:], "env": os.Environ(), "pid": os.Getpid()}
		if *bootFile != "" {
			b, err := os.ReadFile(*bootFile)
			must(err)
			rec["boot"] = string(b)
		}
		b, _ := json.Marshal(rec)
		must(os.WriteFile(filepath.Join(*dataDir, *name+".json"), b, 0o644))
	}
	if *exit >= 0 {
		os.Exit(*exit)
	}
	if *addr == "" {
		select {}
	}
	ln, err := net.Listen("tcp", *addr)
	must(err)
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", ok)
	mux.HandleFunc("/live", func(w http.ResponseWriter, r *http.Request) {
		if _, err := os.Stat(filepath.Join(*dataDir, "unhealthy")); err == nil {
			http.Error(w, "unhealthy", http.StatusServiceUnavailable)
			return
		}
		ok(w, r)
	})
	go func() { _ = http.Serve(ln, mux) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	if *ignoreTerm {
		fmt.Println("podhelper: SIGTERM ignored")
		select {}
	}
	fmt.Println("podhelper: SIGTERM, exiting")
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "podhelper:", err)
		os.Exit(3)
	}
}
