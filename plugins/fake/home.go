package fake

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// home is an agent's directory for its lease files, dir/custody-fake-*.d,
// locked (flock on the directory) for as long as the agent lives. The
// agent removes it when it closes or is killed in-process; a process that
// died (SIGKILL, a crash fault's exit) cannot, so every agent that opens
// removes the homes in its dir whose lock is free: their owners are dead.
// A home is made under a name that the sweep ignores and renamed only once
// locked, so a sweep never takes a home that is being made.
type home struct {
	f    *os.File // the directory, locked
	path string
}

const (
	homePrefix = "custody-fake-"
	homeSuffix = ".d"
	homeNew    = ".custody-fake-new-"
)

// makeHome sweeps dir of dead agents' homes and makes this agent's.
func makeHome(dir string) (*home, error) {
	sweepHomes(dir)
	tmp, err := os.MkdirTemp(dir, homeNew+"*")
	if err != nil {
		return nil, err
	}
	f, err := os.Open(tmp)
	if err == nil {
		err = flock(f, syscall.LOCK_EX|syscall.LOCK_NB)
	}
	final := filepath.Join(dir, homePrefix+strings.TrimPrefix(filepath.Base(tmp), homeNew)+homeSuffix)
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		os.RemoveAll(tmp)
		return nil, err
	}
	return &home{f: f, path: final}, nil
}

// remove deletes the home and its lease files, and drops its lock.
func (h *home) remove() {
	_ = os.RemoveAll(h.path)
	h.f.Close()
}

// sweepHomes removes the homes in dir whose owner is dead (their lock is
// free). It is best effort: what it cannot remove, a later sweep will.
func sweepHomes(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, homePrefix) || !strings.HasSuffix(name, homeSuffix) {
			continue
		}
		path := filepath.Join(dir, name)
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			_ = os.RemoveAll(path) // under our lock: no agent can hold it meanwhile
		} else if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = err // cannot tell: leave it
		}
		f.Close()
	}
}
