package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
)

// profileEnv names a directory: when set, `custody serve` writes a CPU
// profile of the whole host process (the embedded etcd included, where
// this rank runs it) to <dir>/<host name>-<pid>.pprof, from start until
// it exits. Hosts started by `custody bench` and `custody demo` inherit it,
// so one bench run profiles every host it starts. Read the file with
// `go tool pprof bin/custody FILE`.
const profileEnv = "CUSTODY_CPU_PROFILE_DIR"

// startProfile starts the CPU profile profileEnv asks for, if any; the
// function it returns stops it and closes the file.
func startProfile(name string) (func() error, error) {
	dir := os.Getenv(profileEnv)
	if dir == "" {
		return func() error { return nil }, nil
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", name, os.Getpid()))
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: CPU profile: %w; unset %s or name a writable directory", profileEnv, err, profileEnv)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: CPU profile %s: %w", profileEnv, path, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
