package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"

	"github.com/custody-dev/custody/client"
)

// sleeper starts a process that lives until killed and returns it with a
// channel that is closed once it exited (cmd.ProcessState says how).
func sleeper(t *testing.T) (*exec.Cmd, chan struct{}) {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return cmd, exited
}

func stateConfig(t *testing.T) *Config {
	return &Config{Name: "victim", StateDir: filepath.Join(t.TempDir(), "state")}
}

// TestRestartedHostFencesTheTransportItsPredecessorLeft: a record names a
// live process (standing in for a transport whose host died and whose
// death mechanisms failed); the next host of that name kills it and waits
// for it before it goes on.
func TestRestartedHostFencesTheTransportItsPredecessorLeft(t *testing.T) {
	cfg := stateConfig(t)
	s, err := openState(cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	orphan, exited := sleeper(t)
	require.NoError(t, s.recordTransport(orphan.Process.Pid))
	s.close() // the host dies; its record stays

	s, err = openState(cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	defer s.close()
	pidfd, err := unix.PidfdOpen(orphan.Process.Pid, 0)
	if err == nil { // ESRCH: already reaped, so gone
		defer unix.Close(pidfd)
		// openState returned only after the process died.
		require.True(t, pidfdExited(pidfd, 0), "the left-behind transport still runs after the next host started")
	}
	<-exited
	assert.Equal(t, syscall.SIGKILL, orphan.ProcessState.Sys().(syscall.WaitStatus).Signal())
	_, err = os.Stat(s.pidfile())
	assert.ErrorIs(t, err, os.ErrNotExist, "the record is removed once its process is fenced")
}

// TestOrphanFenceSparesAReusedPid: a record whose pid now names another
// process (its start time differs) kills nothing.
func TestOrphanFenceSparesAReusedPid(t *testing.T) {
	cfg := stateConfig(t)
	s, err := openState(cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	other, exited := sleeper(t)
	start, err := procStartTime(other.Process.Pid)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(s.pidfile(), fmt.Appendf(nil, "%d %d\n", other.Process.Pid, start+1), 0o600))
	s.close()

	s, err = openState(cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	defer s.close()
	pidfd, err := unix.PidfdOpen(other.Process.Pid, 0)
	require.NoError(t, err)
	defer unix.Close(pidfd)
	assert.False(t, pidfdExited(pidfd, 0), "a process that is not the recorded transport was killed")
	select {
	case <-exited:
		t.Fatalf("the unrelated process exited: %v", other.ProcessState)
	default:
	}
}

// TestSecondHostOfTheSameNameIsRefused: two live hosts of one name would
// fence each other's transport; the second is refused.
func TestSecondHostOfTheSameNameIsRefused(t *testing.T) {
	cfg := stateConfig(t)
	s, err := openState(cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	defer s.close()
	_, err = openState(cfg, hclog.NewNullLogger())
	require.ErrorContains(t, err, `host "victim": another host of this name runs`)
}

func TestStateDirMustBePrivate(t *testing.T) {
	cfg := stateConfig(t)
	require.NoError(t, os.MkdirAll(cfg.StateDir, 0o700))
	require.NoError(t, os.Chmod(cfg.StateDir, 0o755))
	_, err := openState(cfg, hclog.NewNullLogger())
	require.ErrorContains(t, err, "state_dir")
	require.ErrorContains(t, err, "must be private")
}

// serveExtra are optional settings of startServe: a descriptor limit
// (soft and hard) for the process, and a metrics endpoint.
type serveExtra struct {
	nofile  int
	metrics string
}

// serveProc is a `custody serve` process and an engine client for it.
type serveProc struct {
	log    *lockedBuffer // the host's stdout and stderr
	cmd    *exec.Cmd
	exited chan error
	c      *client.Client
	pool   string
	poolID uint32
}

// startServe runs `custody serve` as a process named name, with a pool of
// blocks blocks in dir, its metadata endpoint on metaAddr, and the state
// directory and fake parameters given.
func startServe(t *testing.T, name, dir, metaAddr, stateDir string, blocks int, params map[string]string, extra serveExtra) *serveProc {
	t.Helper()
	p := &serveProc{pool: filepath.Join(dir, name+".kv")}
	require.NoError(t, os.WriteFile(p.pool, make([]byte, blocks*testBlockSize), 0o600))
	socket := filepath.Join(dir, name+".sock")
	cfg := map[string]any{
		"name":      name,
		"transport": map[string]any{"path": fakePlugin, "params": params, "call_timeout": "5s"},
		"metadata":  map[string]any{"listen": metaAddr},
		"engine":    map[string]any{"socket": socket},
		"state_dir": stateDir,
		"log_level": "warn",
	}
	if extra.metrics != "" {
		cfg["metrics"] = map[string]any{"listen": extra.metrics}
	}
	raw, err := yaml.Marshal(cfg)
	require.NoError(t, err)
	cfgPath := filepath.Join(dir, name+".yaml")
	require.NoError(t, os.WriteFile(cfgPath, raw, 0o600))
	p.cmd = exec.Command(custodyBin, "serve", "--config", cfgPath)
	if extra.nofile > 0 {
		p.cmd = exec.Command("sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$0" serve --config "$1"`, extra.nofile), custodyBin, cfgPath)
	}
	p.log = &lockedBuffer{}
	p.cmd.Stdout = io.MultiWriter(testWriter{t}, p.log)
	p.cmd.Stderr = p.cmd.Stdout
	require.NoError(t, p.cmd.Start())
	p.exited = make(chan error, 1)
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.c != nil {
			p.c.Close()
		}
		_ = p.cmd.Process.Kill()
		<-p.exited
		// A killed host cannot remove its transports' socket directories;
		// the next host of its name would.
		_ = os.RemoveAll(SocketParent(stateDir, name))
	})
	p.c, err = client.Dial(socket)
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := p.c.Status(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case werr := <-p.exited:
			p.exited <- werr
			t.Fatalf("host %s exited at start: %v", name, werr)
		default:
		}
		require.True(t, time.Now().Before(deadline), "host %s did not answer within 30s: %v", name, err)
		time.Sleep(10 * time.Millisecond) // waiting for a process to start listening
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p.poolID, err = p.c.RegisterPool(ctx, "kv", p.pool, 0, testBlockSize, uint32(blocks))
	require.NoError(t, err)
	return p
}

// lockedBuffer is a buffer safe for concurrent writes and reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func loopbackPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// TestKilledHostsTransportWritesNothingAfterward SIGKILLs a `custody serve`
// host while a peer pushes into its engine's memory, and proves that no
// byte lands there afterwards: the host's transport process goes away
// with its host (decided by its pidfd), and after that the region's bytes
// stay as they are through the peer's next completed transfer attempt.
func TestKilledHostsTransportWritesNothingAfterward(t *testing.T) {
	const blocks = 8
	prefill := startHost(t, "prefill", blocks, nil, "chunk", "4096", "chunk_delay", "2ms")
	shared := filepath.Dir(prefill.cfg.Transport.Params["dir"])
	dir := filepath.Join(shared, "victim")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	metaAddr := loopbackPort(t)
	victim := startServe(t, "decode", dir, metaAddr, prefill.cfg.StateDir, blocks, map[string]string{"dir": dir}, serveExtra{})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := victim.c.Status(ctx)
	require.NoError(t, err)
	tpid := int(st.TransportPid)
	require.NotZero(t, tpid)
	pidfd, err := unix.PidfdOpen(tpid, 0)
	require.NoError(t, err)
	t.Cleanup(func() { // a transport that outlived its host must not outlive the test
		_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		unix.Close(pidfd)
	})

	db, err := victim.c.Alloc(ctx, victim.poolID, blocks)
	require.NoError(t, err)
	require.NoError(t, prefill.c.ConnectPeer(ctx, "decode", client.RemoteRank{Address: metaAddr, Pool: "kv"}))
	pb, err := prefill.c.Alloc(ctx, prefill.poolID, blocks)
	require.NoError(t, err)
	prefill.fill(pb)
	part := client.Part{Pool: prefill.poolID, Local: pb, Remote: db}
	write := func(id string) error {
		require.Eventually(t, func() bool {
			err = prefill.c.Write(ctx, id, tok(id), "decode", 1, time.Second, part) // a failed push is reported when its lease ends
			return status.Code(err) != codes.Unavailable                            // the handshake runs
		}, 20*time.Second, time.Millisecond)
		return err
	}

	// The push runs: its first bytes reach the engine's memory.
	zero := readFile(t, victim.pool)
	require.NoError(t, write("w1"))
	require.Eventually(t, func() bool { return !bytes.Equal(zero, readFile(t, victim.pool)) },
		20*time.Second, time.Millisecond, "the peer's push never reached the engine's memory")

	// The host dies mid-transfer.
	require.NoError(t, victim.cmd.Process.Kill())
	<-victim.exited
	victim.exited <- errors.New("killed")
	require.True(t, pidfdExited(pidfd, 10*time.Second),
		"transport pid %d outlived its SIGKILLed host; it can still move bytes into engine memory", tpid)

	// From now on nothing may change the region: not the transfer that was
	// running, nor the peer's next attempt.
	before := readFile(t, victim.pool)
	prefill.waitFinished("w1")
	if err := write("w2"); err != nil {
		// The dead host's handshake failed before the push came: refused
		// with its error (handshake_backoff.go), nothing taken.
		require.ErrorIs(t, err, client.ErrHandshakeFailed)
	} else {
		f := prefill.waitFinished("w2")
		assert.Contains(t, failedIDs(f), "w2", "a push into a dead host's memory cannot succeed")
	}
	after := readFile(t, victim.pool)
	assert.True(t, bytes.Equal(before, after), "bytes landed in the engine's memory after its host and transport died")
}
