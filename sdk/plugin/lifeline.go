package plugin

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A transport dies with its host. Two mechanisms, each enough alone:
//
//   - Parent death signal: the process is started with Pdeathsig SIGKILL.
//     Linux sends it when the thread that started the process exits, so
//     every launch runs on one OS thread that is locked for the life of the
//     host (launchThread), never on a thread the Go runtime might retire.
//   - Lifeline: the host hands the process the read end of a pipe whose
//     write end only the host holds (close-on-exec, so no other child
//     inherits it). The host never writes to it; when the host is gone,
//     whatever ended it, the kernel closes the write end and the read end
//     reads EOF. Serve checks the lifeline before any other work and
//     watches it from then on; at EOF the process exits at once. This does
//     not depend on the signal, on the thread, or on the process's parent.

// envLifeline names the descriptor of the lifeline's read end in the
// transport process.
const envLifeline = "CUSTODY_LIFELINE_FD"

// lifelineExit is the exit status of a transport that saw its host gone.
const lifelineExit = 4

// Test switches (export_test.go), so that each mechanism is proven alone.
var (
	deathSignal = syscall.SIGKILL
	noLifeline  = false
)

// lifeline is the host's end of a transport's lifeline.
type lifeline struct {
	r, w *os.File
	dir  string // the process's socket directory (scratch.go), removed at cut
	held bool   // a reference on launchThread
	once sync.Once
}

// attachLifeline prepares cmd so the process it starts dies with this one:
// the pipe is added to ExtraFiles, its descriptor to the environment, and
// the parent death signal is set. Call start to start the process.
func attachLifeline(cmd *exec.Cmd) (*lifeline, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = deathSignal
	if noLifeline {
		return &lifeline{}, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("lifeline pipe: %w", err)
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	fd := 3 + len(cmd.ExtraFiles) - 1
	// The host's environment first, then ours, so ours wins (exec keeps
	// the last value of a key); Launch tells go-plugin not to append the
	// host's environment again after it.
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, envLifeline+"="+strconv.Itoa(fd))
	return &lifeline{r: r, w: w}, nil
}

// start runs fn, which starts the process, on the launch thread, then
// closes the read end here: only the process holds it from then on. The
// launch thread lives at least until cut.
func (l *lifeline) start(fn func() error) error {
	ch := launchThread.acquire()
	l.held = true
	done := make(chan error, 1)
	ch <- func() { done <- fn() }
	err := <-done
	if l.r != nil {
		l.r.Close()
	}
	return err
}

// cut closes the host's end and lets the launch thread go. Call it once
// the process is gone (or will not be used): a process that still lives
// exits at once.
func (l *lifeline) cut() {
	l.once.Do(func() {
		if l.w != nil {
			l.r.Close()
			l.w.Close()
		}
		if l.held {
			launchThread.release()
		}
		if l.dir != "" {
			_ = os.RemoveAll(l.dir)
		}
	})
}

// launchThread runs every launch on one goroutine locked to its OS thread,
// so that the parent death signal of a process it starts fires only when
// that thread exits: and it exits only once no process it started lives
// (each holds a reference until cut), or with the whole host.
var launchThread threadRef

type threadRef struct {
	mu   sync.Mutex
	ch   chan func()
	refs int
}

func (t *threadRef) acquire() chan func() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ch == nil {
		ch := make(chan func())
		t.ch = ch
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			for f := range ch {
				f()
			}
		}()
	}
	t.refs++
	return t.ch
}

func (t *threadRef) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refs--
	if t.refs == 0 {
		close(t.ch)
		t.ch = nil
	}
}

// holdLifeline is the transport side: when the host passed a lifeline, it
// exits at once if the host is already gone, and otherwise watches the
// lifeline and exits the moment the host is gone. It runs before any
// other work of Serve.
func holdLifeline() {
	v, ok := os.LookupEnv(envLifeline)
	if !ok {
		return // not launched by Launch (a test serving in-process, a hand start)
	}
	_ = os.Unsetenv(envLifeline)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		fmt.Fprintf(os.Stderr, "custody transport: %s=%q is not a descriptor; refusing to run without a lifeline to the host\n", envLifeline, v)
		os.Exit(lifelineExit)
	}
	syscall.CloseOnExec(fd) // children of the transport do not keep it
	if hostGone(fd, 0) {
		os.Exit(lifelineExit)
	}
	go func() {
		for !hostGone(fd, -1) {
		}
		os.Exit(lifelineExit)
	}()
}

// hostGone polls the lifeline for timeout milliseconds (-1: until it
// changes) and reports whether the host's end is closed. The host never
// writes, so any readiness is EOF; an error other than EINTR counts as
// gone, since the lifeline can no longer vouch for the host.
func hostGone(fd, timeout int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, timeout)
	switch {
	case err == unix.EINTR:
		return false
	case err != nil:
		return true
	}
	return n > 0 && fds[0].Revents != 0
}
