package plugin_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// The tests of this package launch real plugin processes: the fake
// transport's binary (built once here), the same built to announce contract
// v2, and this test binary itself serving blockingTransport (helperEnv).
var (
	fakeBin   string // plugins/fake/cmd/custody-transport-fake
	fakeV2Bin string // the same, announcing contract major version 2
	helperBin string // this test binary, serving blockingTransport
)

const (
	// helperEnv, set to "blocking" or "noevents", makes this test binary
	// serve blockingTransport or noEvents instead of running tests.
	helperEnv = "CUSTODY_SDK_TEST_PLUGIN"
	// claimEventsEnv, set to "1", makes blockingTransport claim events in
	// Describe (which it does not implement).
	claimEventsEnv = "CUSTODY_SDK_TEST_CLAIM_EVENTS"
	// describeMajorEnv, when set, is the contract major version
	// blockingTransport's Describe reports (its handshake stays v1).
	describeMajorEnv = "CUSTODY_SDK_TEST_DESCRIBE_MAJOR"
	fakeMain         = "github.com/custody-dev/custody/plugins/fake/cmd/custody-transport-fake"
)

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "blocking":
		plugin.Serve(&blockingTransport{Transport: fake.New()})
		os.Exit(0)
	case "noevents":
		plugin.Serve(noEvents{fake.New()})
		os.Exit(0)
	}
	if mode := os.Getenv(hostHelperEnv); mode != "" {
		os.Exit(helperHost(mode))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "custody-sdk-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "sdk tests:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	fakeBin = filepath.Join(dir, "custody-transport-fake")
	fakeV2Bin = filepath.Join(dir, "custody-transport-fake-v2")
	if helperBin, err = os.Executable(); err != nil {
		fmt.Fprintln(os.Stderr, "sdk tests:", err)
		return 1
	}
	for _, b := range []struct{ out, ldflags string }{
		{fakeBin, ""},
		{fakeV2Bin, "-X github.com/custody-dev/custody/sdk/plugin.servedContractMajor=2"},
	} {
		cmd := exec.Command("go", "build", "-ldflags", b.ldflags, "-o", b.out, fakeMain)
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "sdk tests: build %s: %v\n%s", b.out, err, out)
			return 1
		}
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "sdk tests: goroutines leaked:", err)
			return 1
		}
	}
	return code
}

// launch starts the plugin at path for one test or benchmark and kills it
// when that ends.
func launch(tb testing.TB, path string, opts plugin.LaunchOptions) *plugin.Plugin {
	tb.Helper()
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if ringsOff {
		opts.DisableRings = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := plugin.Launch(ctx, path, opts)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, p.Kill()) })
	return p
}

// ringsOff makes launch keep every call on gRPC (bothPaths).
var ringsOff bool

// bothPaths runs test over the rings and again over gRPC alone.
func bothPaths(t *testing.T, test func(t *testing.T)) {
	t.Run("rings", func(t *testing.T) { test(t) })
	t.Run("grpc", func(t *testing.T) {
		ringsOff = true
		defer func() { ringsOff = false }()
		test(t)
	})
}

// requirePath checks that an open plugin uses the path bothPaths chose.
func requirePath(t testing.TB, p *plugin.Plugin) {
	t.Helper()
	require.Equal(t, !ringsOff, p.Rings(), "Post and completions go through the rings")
}

// blockingTransport is a fake whose Poll blocks until its context ends, so
// that a test can kill the process under a pending call. Resources counts
// the Polls blocked now as InFlight, so the test knows when one is pending.
// It is not an EventSource; it claims to be one in Describe when
// claimEventsEnv is "1". Its Describe reports the contract major version in
// describeMajorEnv when that is set.
type blockingTransport struct {
	sdk.Transport
	blocked atomic.Uint64
}

func (b *blockingTransport) Describe(ctx context.Context) (sdk.Description, error) {
	d, err := b.Transport.Describe(ctx)
	d.Name = "blocking"
	d.Capabilities.Events = os.Getenv(claimEventsEnv) == "1"
	if v, perr := strconv.ParseUint(os.Getenv(describeMajorEnv), 10, 32); perr == nil {
		d.ContractMajor = uint32(v)
	}
	return d, err
}

func (b *blockingTransport) Poll(ctx context.Context, _ []sdk.HandleID) ([]sdk.HandleStatus, error) {
	b.blocked.Add(1)
	defer b.blocked.Add(^uint64(0))
	<-ctx.Done()
	return nil, sdk.Errorf(sdk.CodeTimeout, "blocking: Poll gave up: %v", ctx.Err())
}

func (b *blockingTransport) Resources(context.Context) (sdk.Resources, error) {
	return sdk.Resources{InFlight: b.blocked.Load()}, nil
}

// noEvents is a fake that is no EventSource and says so in Describe: the
// plugin side of the rings must poll its handles.
type noEvents struct{ sdk.Transport }

func (n noEvents) Describe(ctx context.Context) (sdk.Description, error) {
	d, err := n.Transport.Describe(ctx)
	d.Capabilities.Events = false
	return d, err
}
