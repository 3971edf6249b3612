package plugin_test

import (
	"context"
	"crypto/sha256"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

func TestLaunchDescribesTheTransport(t *testing.T) {
	p := launch(t, fakeBin, plugin.LaunchOptions{})
	want, err := fake.New().Describe(context.Background())
	require.NoError(t, err)
	assert.Equal(t, want, p.Description())
	got, err := p.Describe(context.Background())
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.True(t, p.HasEvents())
	assert.Positive(t, p.Pid())
	assert.NotEqual(t, os.Getpid(), p.Pid())
}

func TestLaunchRefusesAnotherContractMajor(t *testing.T) {
	_, err := plugin.Launch(context.Background(), fakeV2Bin, plugin.LaunchOptions{Logger: hclog.NewNullLogger()})
	require.Error(t, err)
	var verr *plugin.ContractVersionError
	require.ErrorAs(t, err, &verr)
	assert.Equal(t, &plugin.ContractVersionError{Path: fakeV2Bin, Plugin: 2, Host: sdk.ContractMajor}, verr)
	assert.Contains(t, err.Error(), "transport at "+fakeV2Bin+" speaks contract v2; this host speaks v1")
}

// TestLaunchRefusesAnotherMajorInDescribe: a plugin whose handshake says v1
// but whose Describe says otherwise is refused too.
func TestLaunchRefusesAnotherMajorInDescribe(t *testing.T) {
	t.Setenv(helperEnv, "blocking")
	t.Setenv(describeMajorEnv, "2")
	_, err := plugin.Launch(context.Background(), helperBin, plugin.LaunchOptions{Logger: hclog.NewNullLogger()})
	var verr *plugin.ContractVersionError
	require.ErrorAs(t, err, &verr)
	assert.Equal(t, &plugin.ContractVersionError{Path: helperBin, Plugin: 2, Host: sdk.ContractMajor}, verr)
}

func TestLaunchChecksum(t *testing.T) {
	bin, err := os.ReadFile(fakeBin)
	require.NoError(t, err)
	sum := sha256.Sum256(bin)

	t.Run("matching binary starts", func(t *testing.T) {
		p := launch(t, fakeBin, plugin.LaunchOptions{Checksum: sum[:]})
		_, err := p.Resources(context.Background())
		require.NoError(t, err)
	})
	t.Run("other binary is refused", func(t *testing.T) {
		other := sum
		other[0] ^= 0xff
		_, err := plugin.Launch(context.Background(), fakeBin, plugin.LaunchOptions{Checksum: other[:], Logger: hclog.NewNullLogger()})
		require.Error(t, err)
		assert.ErrorContains(t, err, "SHA-256 differs")
		assert.ErrorContains(t, err, fakeBin)
	})
}

func TestLaunchBadPath(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-transport")
	_, err := plugin.Launch(context.Background(), missing, plugin.LaunchOptions{Logger: hclog.NewNullLogger()})
	require.Error(t, err)
	assert.ErrorContains(t, err, missing)

	_, err = plugin.Launch(context.Background(), "", plugin.LaunchOptions{})
	assert.ErrorContains(t, err, "empty path")
}

// TestLaunchNotAPlugin: a binary that does not speak the handshake is
// refused, not hung on.
func TestLaunchNotAPlugin(t *testing.T) {
	_, err := plugin.Launch(context.Background(), "/bin/true", plugin.LaunchOptions{Logger: hclog.NewNullLogger(), StartTimeout: time.Minute})
	require.Error(t, err)
	assert.ErrorContains(t, err, "/bin/true")
}

func TestEventsFollowDescribe(t *testing.T) {
	t.Run("not claimed: refused without crossing", func(t *testing.T) {
		t.Setenv(helperEnv, "blocking")
		t.Setenv(claimEventsEnv, "0")
		p := launch(t, helperBin, plugin.LaunchOptions{})
		assert.False(t, p.HasEvents())
		evs, err := p.Events(context.Background(), 0)
		assert.Nil(t, evs)
		assert.ErrorIs(t, err, sdk.ErrUnsupported)
		assert.ErrorContains(t, err, "does not claim events")
	})
	t.Run("claimed but not implemented: the plugin answers unimplemented", func(t *testing.T) {
		t.Setenv(helperEnv, "blocking")
		t.Setenv(claimEventsEnv, "1")
		p := launch(t, helperBin, plugin.LaunchOptions{})
		assert.True(t, p.HasEvents())
		evs, err := p.Events(context.Background(), 0)
		assert.Nil(t, evs)
		assert.ErrorIs(t, err, sdk.ErrUnsupported)
		assert.ErrorContains(t, err, "sdk.EventSource")
	})
	t.Run("claimed and implemented", func(t *testing.T) {
		p := launch(t, fakeBin, plugin.LaunchOptions{})
		require.NoError(t, p.Open(context.Background(), sdk.OpenRequest{Agent: "a", Params: map[string]string{"dir": t.TempDir()}}))
		evs, err := p.Events(context.Background(), 0)
		assert.NoError(t, err)
		assert.Empty(t, evs)
	})
}

// TestPluginLogsReachTheHostLogger: the plugin's hclog output crosses
// stderr into LaunchOptions.Logger.
func TestPluginLogsReachTheHostLogger(t *testing.T) {
	t.Setenv("CUSTODY_TRANSPORT_LOG_LEVEL", "debug")
	r, w := io.Pipe()
	logs := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		logs <- b
	}()
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: w})
	p, err := plugin.Launch(context.Background(), fakeBin, plugin.LaunchOptions{Logger: logger})
	require.NoError(t, err)
	p.Stop()
	require.NoError(t, w.Close())
	out := string(<-logs)
	assert.Contains(t, out, "custody-transport", "the plugin's logger name")
	assert.Contains(t, out, "plugin process exited")
}

// TestStop ends the plugin gracefully; calls after it are PLUGIN_SHUTDOWN.
func TestStop(t *testing.T) {
	p := launch(t, fakeBin, plugin.LaunchOptions{})
	p.Stop()
	select {
	case <-p.Exited():
	default:
		t.Fatal("Exited not closed after Stop returned")
	}
	assert.True(t, p.ExitState().Success(), "a graceful end: %v", p.ExitState())
	_, err := p.Resources(context.Background())
	assert.ErrorIs(t, err, sdk.ErrPluginShutdown)
	p.Stop()
}

// A transport whose shared library is missing is refused with the
// library's name, as the dynamic linker gave it, not only go-plugin's list
// of possible causes.
func TestLaunchNamesTheLibraryItCouldNotLoad(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build a binary with a missing library")
	}
	dir := t.TempDir()
	src := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
		return p
	}
	lib := filepath.Join(dir, "libcustodymissing.so")
	bin := filepath.Join(dir, "custody-transport-missing-lib")
	run := func(args ...string) {
		out, err := exec.Command(cc, args...).CombinedOutput()
		require.NoError(t, err, string(out))
	}
	run("-shared", "-fPIC", "-o", lib, src("lib.c", "int custody_missing(void) { return 0; }\n"))
	run("-o", bin, src("main.c", "int custody_missing(void);\nint main(void) { return custody_missing(); }\n"), "-L"+dir, "-lcustodymissing", "-Wl,-rpath,"+dir)
	require.NoError(t, os.Remove(lib))

	_, err = plugin.Launch(context.Background(), bin, plugin.LaunchOptions{Logger: hclog.NewNullLogger(), StartTimeout: time.Minute})
	require.Error(t, err)
	assert.ErrorContains(t, err, "the dynamic linker could not load libcustodymissing.so (cannot open shared object file")
	assert.ErrorContains(t, err, "ldd "+bin)
}
