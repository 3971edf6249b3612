package fake

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// peerEnv, set to a directory, makes the test binary run a fake agent "b"
// in its own process (runPeer) instead of the tests.
const peerEnv = "CUSTODY_FAKE_TEST_PEER"

// peerSize is the size of the peer process's region.
const peerSize = 1 << 20

// runPeer is the peer process: it opens agent b with one region in dir,
// prints its metadata (hex) on a line, then prints each notification it
// receives as "note FROM MESSAGE" until stdin closes.
func runPeer(dir string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "peer:", err); return 1 }
	b := New()
	if err := b.Open(ctx, sdk.OpenRequest{Agent: "b", Params: map[string]string{"dir": dir}}); err != nil {
		return fail(err)
	}
	path, err := NewRegionFile(dir, peerSize)
	if err != nil {
		return fail(err)
	}
	regs, err := b.RegisterMemory(ctx, []sdk.Region{{Path: path, Length: peerSize}})
	if err != nil || regs[0].Err != nil {
		return fail(fmt.Errorf("%v %v", err, regs[0].Err))
	}
	md, err := b.LocalMetadata(ctx)
	if err != nil {
		return fail(err)
	}
	fmt.Println(hex.EncodeToString(md))
	closed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(closed) }()
	for {
		notes, err := b.Notifications(ctx, 0)
		if err != nil {
			return fail(err)
		}
		for _, n := range notes {
			fmt.Printf("note %s %s\n", n.From, n.Message)
		}
		select {
		case <-closed:
			return 0
		case <-time.After(time.Millisecond): // the peer's own polling cadence
		}
	}
}

// TestTwoProcesses moves bytes into a fake agent in another process,
// delivers the post's notification there, and when that process is killed,
// a transfer into its memory ends REMOTE_DISCONNECT: the death of the
// process is the fence of incoming transfers.
func TestTwoProcesses(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), peerEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	t.Cleanup(func() {
		stdin.Close()
		<-exited
	})
	lines := make(chan string)
	go func() {
		defer close(exited)
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_ = cmd.Wait()
	}()
	next := func() string {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the peer process ended early")
			return l
		case <-time.After(wait):
			t.Fatal("no line from the peer process")
		}
		return ""
	}
	md, err := hex.DecodeString(next())
	require.NoError(t, err)
	meta, err := decodeMetadata(md)
	require.NoError(t, err)
	require.Len(t, meta.Regions, 1)
	require.NotEqual(t, pid, meta.PID)

	g := newGate()
	a := New()
	a.stepHook = g.hook
	require.NoError(t, a.Open(ctx, sdk.OpenRequest{Agent: "a", Params: map[string]string{"dir": t.TempDir(), "peer_dirs": os.TempDir(), "chunk": "65536"}}))
	t.Cleanup(func() {
		g.open()
		require.NoError(t, a.Close(ctx))
	})
	aPath := regionFile(t, peerSize, 9)
	ar := register(t, a, sdk.Region{Path: aPath, Length: peerSize})
	res, err := a.LoadPeers(ctx, []sdk.PeerSpec{{Name: "b", Metadata: md}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	peer := res[0].ID
	local := prepare(t, a, 0, sdk.Descriptor{Region: ar, Length: peerSize})
	remote := prepare(t, a, peer, sdk.Descriptor{Region: sdk.RegionID(meta.Regions[0].ID), Length: peerSize})
	spec := sdk.PostSpec{Op: sdk.OpWrite, Local: local, LocalIndices: []uint32{0}, Remote: remote, RemoteIndices: []uint32{0}, Notification: []byte("landed")}

	h := postOne(t, a, spec)
	for poll(t, a, h).State == sdk.StateInProgress {
		g.steps(1)
	}
	require.Equal(t, sdk.StateDone, poll(t, a, h).State)
	require.True(t, bytes.Equal(readFile(t, aPath), readFile(t, meta.Regions[0].Path)), "the bytes are in the other process's region")
	require.Equal(t, "note a landed", next())
	release(t, a, h)

	// Kill the peer process between two chunks of the next transfer.
	before := readFile(t, meta.Regions[0].Path)
	require.NoError(t, os.WriteFile(aPath, randomBytes(peerSize, 10), 0o600))
	h = postOne(t, a, spec)
	g.steps(1)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	<-exited
	g.open()
	st := terminal(t, a, h)
	require.Equal(t, sdk.StateFailed, st.State)
	require.ErrorIs(t, st.Reason, sdk.ErrRemoteDisconnect)
	after := readFile(t, meta.Regions[0].Path)
	require.True(t, bytes.Equal(after[65536:], before[65536:]), "nothing after the first chunk landed in the dead peer's memory")
	release(t, a, h)
	errs, err := a.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: peer, Message: []byte("x")}})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], sdk.ErrRemoteDisconnect, "the dead peer's socket is gone")

	_, err = a.ReleaseDescriptors(ctx, []sdk.DlistID{local, remote})
	require.NoError(t, err)
	_, err = a.UnloadPeers(ctx, []sdk.PeerID{peer})
	require.NoError(t, err)
	_, err = a.DeregisterMemory(ctx, []sdk.RegionID{ar})
	require.NoError(t, err)
}
